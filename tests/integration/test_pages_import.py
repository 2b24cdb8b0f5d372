"""The New job page takes documents (Markdown, EPUB, TXT as a document) and keyed CSV."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain.documents import squeeze
from tests.helpers import view
from tests.integration.test_hostile_documents import PROGRAM_WORDS
from tests.integration.test_pages import browser, job_count, text_of  # noqa: F401 (fixture)
from tests.support.epubs import (
    BOOK_AUTHOR,
    BOOK_TITLE,
    SPOKEN,
    build_book_epub,
    build_epub,
    hand_made_epub,
    package,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"


def _post(
    client: FlaskClient, token: str, filename: str, content: bytes, **form: str | list[str]
) -> tuple[int, str]:
    data = {
        "title": "", "voice": "alloy", "items": "", "max_characters": "1500",
        "file": (io.BytesIO(content), filename), "csrf_token": token, **form,
    }  # fmt: skip
    response = client.post("/jobs", data=data, content_type="multipart/form-data")
    return response.status_code, response.headers.get("Location", "") or text_of(response)


def _job_id(location: str) -> int:
    return int(location.rstrip("/").rsplit("/", 1)[-1])


def test_the_form_offers_documents(browser: tuple[FlaskClient, str]) -> None:  # noqa: F811
    client, _ = browser
    page = text_of(client.get("/jobs/new"))
    assert ".epub" in page and 'name="file_mode"' in page and 'name="max_characters"' in page


def test_a_markdown_upload_makes_a_chaptered_job(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    status, location = _post(client, token, "novel.md", (FIXTURES / "novel.md").read_bytes())
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert job["title"] == "Chapter One: The Harbour"  # its first level-1 heading
    assert [c["title"] for c in job["chapters"]][1:] == [
        "Chapter One: The Harbour", "Chapter Two: At Sea",
    ]  # fmt: skip


def test_an_epub_upload_keeps_its_table_of_contents(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    status, location = _post(client, token, "book.epub", build_epub(), title="Book")
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert len(job["chapters"]) == 3
    assert squeeze(" ".join(i["text"] for i in job["items"])) == SPOKEN


@pytest.mark.parametrize(("mode", "items"), [("lines", 3), ("document", 1)])
def test_a_txt_upload_is_lines_or_a_document(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
    mode: str,
    items: int,
) -> None:
    client, token = browser
    content = b"First line.\nSecond line.\nThird line.\n"
    status, location = _post(client, token, "t.txt", content, title="T", file_mode=mode)
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert len(job["items"]) == items
    assert len(job["chapters"]) == (1 if mode == "document" else 0)


def test_a_keyed_csv_upload_keeps_the_keys(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    content = b"key,text\nwelcome_01,Welcome\nbye_01,Goodbye\n"
    status, location = _post(client, token, "prompts.csv", content, title="IVR")
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert [(i["key"], i["text"]) for i in job["items"]] == [
        ("welcome_01", "Welcome"), ("bye_01", "Goodbye"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("filename", "content", "form", "field"),
    [
        ("x.epub", b"PK\x03\x04 broken", {"title": "x"}, "file-error"),
        ("x.md", b"```\nonly code\n```\n", {"title": "x"}, "file-error"),
        (
            "x.md",
            b"# Title\n\ntext",
            {"title": "x", "max_characters": "10"},
            "max-characters-error",
        ),
    ],
)
def test_a_bad_document_is_shown_next_to_its_field(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
    filename: str,
    content: bytes,
    form: dict[str, str],
    field: str,
) -> None:
    client, token = browser
    status, page = _post(client, token, filename, content, **form)
    assert status == 422
    assert f'id="{field}"' in page
    assert job_count(svc, admin) == 0


def test_a_broken_epub_is_explained_in_words_on_the_page(
    browser: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    # ebooklib's own failure reached the page as "TypeError: 'NoneType' object is not
    # iterable"; the page shows the sentence the API answers.
    client, token = browser
    status, page = _post(client, token, "x.epub", hand_made_epub(opf=package(manifest=b"")))
    assert status == 422
    assert "its package file has no manifest" in page
    assert not PROGRAM_WORDS.search(page), PROGRAM_WORDS.search(page)


def test_the_job_page_shows_the_chapters_as_sections_with_their_counts(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    status, location = _post(
        client, token, "novel.md", (FIXTURES / "novel.md").read_bytes(), max_characters="200"
    )
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    chapters = job["chapters"]
    assert len(chapters) == 3 and all(c["items"] >= 1 for c in chapters)
    page = text_of(client.get(location))
    nav = page.split('id="chapters"', 1)[1].split("</nav>", 1)[0]
    for chapter in chapters:
        count = f"{chapter['items']} item{'s' if chapter['items'] != 1 else ''}"
        assert chapter["title"] in nav and f'data-chapter-items="{chapter["index"]}">{count}' in nav
        # The section row stands right before the chapter's first item, with its count.
        section = page.split(f'id="chapter-{chapter["index"]}"', 1)[1].split("</tr>", 2)
        assert chapter["title"] in section[0] and count in section[0]
        assert f'<td class="muted cell-id">{chapter["first_position"]}</td>' in section[1]
    assert page.count('class="chapter-row"') == 3
    # A filtered list is not in sections: its rows are not runs of a chapter.
    assert 'class="chapter-row"' not in text_of(client.get(f"{location}?status=PENDING"))


def test_the_chapters_ticked_on_the_page_are_imported(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    ticked: dict[str, str | list[str]] = {"chapters_listed": "1", "chapters": ["3", "5"]}
    status, location = _post(client, token, "book.epub", build_book_epub(), **ticked)
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert [c["title"] for c in job["chapters"]] == ["Story of the Door", "Colophon"]
    assert (job["title"], job["author"]) == (BOOK_TITLE, BOOK_AUTHOR)


def test_no_chapter_ticked_is_said_on_the_form(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
) -> None:
    client, token = browser
    before = job_count(svc, admin)
    status, page = _post(client, token, "book.epub", build_book_epub(), chapters_listed="1")
    assert status == 422
    assert "Chapters: keep at least one chapter" in page
    assert job_count(svc, admin) == before
