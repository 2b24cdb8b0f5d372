"""Import choices on both databases: which chapters to keep (front and back matter left out
by default), the document's own title and author, and the chapters offered before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.domain.documents import squeeze
from tests.support.epubs import (
    BOOK_AUTHOR,
    BOOK_CHAPTERS,
    BOOK_TITLE,
    build_book_epub,
    build_epub,
    cover_png,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"
BOUNDARY = "sbchoices"


def _multipart(fields: list[tuple[str, str]], name: str, data: bytes) -> bytes:
    """A multipart body whose fields may repeat (``chapters`` once per index)."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields
    ]
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    return b"".join(parts) + head.encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def _post(
    client: FlaskClient,
    auth: dict[str, str],
    fields: list[tuple[str, str]],
    name: str = "book.epub",
    data: bytes | None = None,
    path: str = "/api/jobs/import",
) -> Any:
    body = _multipart(fields, name, build_book_epub() if data is None else data)
    headers = {**auth, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    return client.post(path, data=body, headers=headers)


def _kept(answer: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(c["title"], c["kept"]) for c in answer["document"]["chapters"]]


def test_front_and_back_matter_are_left_out_by_default(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _post(client, auth, [("voice", "alloy"), ("title", "")])
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    assert _kept(job) == BOOK_CHAPTERS
    assert [c["index"] for c in job["document"]["chapters"]] == list(range(len(BOOK_CHAPTERS)))
    assert [(c["index"], c["title"]) for c in job["chapters"]] == [
        (0, "Story of the Door"), (1, "Search for Mr. Hyde"),
    ]  # fmt: skip
    spoken = squeeze(" ".join(i["text"] for i in job["items"]))
    assert spoken.startswith("Story of the Door Mr. Utterson the lawyer")
    for left_out in ("volunteers", "typeface", "good and not evil", f"By {BOOK_AUTHOR}"):
        assert left_out not in spoken
    # The document's own title and author, as its metadata says.
    assert job["title"] == BOOK_TITLE and job["author"] == BOOK_AUTHOR
    assert job["document"]["title"] == BOOK_TITLE
    assert job["document"]["author"] == BOOK_AUTHOR


@pytest.mark.parametrize(
    "chosen",
    [[("chapters", "1"), ("chapters", "4")], [("chapters", "[1, 4]")], [("chapters", "4,1")]],
)
def test_the_chapters_asked_for_are_kept(
    client: FlaskClient, auth: dict[str, str], chosen: list[tuple[str, str]]
) -> None:
    resp = _post(client, auth, [("voice", "alloy"), *chosen])
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    assert [c["title"] for c in job["chapters"]] == ["Opening", "Search for Mr. Hyde"]
    assert [c["title"] for c in job["document"]["chapters"] if c["kept"]] == [
        "Opening", "Search for Mr. Hyde",
    ]  # fmt: skip
    assert all(i["chapter"] in (0, 1) for i in job["items"])


def test_a_given_title_and_author_win_over_the_documents(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    fields = [("voice", "alloy"), ("title", "Jekyll"), ("author", "R. L. S.")]
    job = _post(client, auth, fields).get_json()
    assert (job["title"], job["author"]) == ("Jekyll", "R. L. S.")


def test_a_markdown_document_is_named_after_its_first_heading(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    data = (FIXTURES / "novel.md").read_bytes()
    job = _post(client, auth, [("voice", "alloy")], "novel.md", data).get_json()
    assert job["title"] == "Chapter One: The Harbour" and job["author"] is None
    assert _kept(job) == [
        ("Chapter One: The Harbour", True),  # the preface, without a heading of its own
        ("Chapter One: The Harbour", True),
        ("Chapter Two: At Sea", True),
    ]


def test_an_epub_without_front_matter_keeps_every_chapter(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    job = _post(client, auth, [("voice", "alloy")], data=build_epub()).get_json()
    assert [c["kept"] for c in job["document"]["chapters"]] == [True, True, True]
    assert job["title"] == "A Test Book"


@pytest.mark.parametrize(
    ("chosen", "fragment"),
    [
        ([("chapters", "9")], "there is no chapter 9"),
        ([("chapters", "-1")], "there is no chapter -1"),
        ([("chapters", "two")], "chapter indexes"),
        ([("chapters", "")], "keep at least one chapter"),
        ([("chapters", "[]")], "keep at least one chapter"),
    ],
)
def test_chapters_that_are_not_the_documents_answer_422(
    client: FlaskClient, auth: dict[str, str], chosen: list[tuple[str, str]], fragment: str
) -> None:
    resp = _post(client, auth, [("voice", "alloy"), *chosen])
    assert resp.status_code == 422, resp.get_json()
    error = resp.get_json()["error"]
    assert error["code"] == "validation_error" and fragment in error["message"]


def test_a_form_of_more_than_1000_parts_answers_413_saying_so(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # A body far under 25 MiB: the answer names the limit that refused it (it said 25 MiB).
    fields = [("voice", "alloy"), *[("chapters", "1")] * 1000]
    resp = _post(client, auth, fields)
    assert resp.status_code == 413, resp.get_json()
    error = resp.get_json()["error"]
    assert error["code"] == "payload_too_large"
    assert error["message"] == "the form has too many parts: 1,000 at most", error


def test_the_chapters_are_offered_before_the_import(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    before = client.get("/api/jobs", headers=auth).get_json()["total"]
    resp = _post(client, auth, [], path="/api/jobs/import/chapters")
    assert resp.status_code == 200, resp.get_json()
    assert _kept({"document": resp.get_json()}) == BOOK_CHAPTERS
    assert resp.get_json()["author"] == BOOK_AUTHOR
    assert client.get("/api/jobs", headers=auth).get_json()["total"] == before


def test_offering_chapters_refuses_what_an_import_refuses(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _post(client, auth, [], "book.pdf", b"%PDF-1.4", path="/api/jobs/import/chapters")
    assert resp.status_code == 422
    assert "unsupported file type" in resp.get_json()["error"]["message"]
    assert _post(client, {}, [], path="/api/jobs/import/chapters").status_code == 401


def test_an_epubs_cover_image_becomes_the_jobs_cover(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    job = _post(client, auth, [("voice", "alloy")]).get_json()
    assert job["cover_url"] is not None
    with client.get(job["cover_url"], headers=auth) as cover:  # closes the streamed file
        assert cover.status_code == 200 and cover.data == cover_png()


def test_a_cover_that_is_no_image_is_left_out_and_the_book_imported(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _post(client, auth, [("voice", "alloy")], data=build_book_epub(b"not an image"))
    assert resp.status_code == 201, resp.get_json()
    assert resp.get_json()["cover_url"] is None
