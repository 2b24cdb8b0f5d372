"""POST /api/jobs/import on both databases: chapters, items, and the 4xx of bad uploads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.domain.documents import squeeze
from tests.support.epubs import SPOKEN, build_epub

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"


BOUNDARY = "sbboundary"


def multipart(fields: dict[str, str], name: str, data: bytes) -> bytes:
    """A multipart body built by hand: the test client would spool a big file to a
    temporary file that it never closes (a ResourceWarning)."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    return b"".join(parts) + head.encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def _import(client: FlaskClient, auth: dict[str, str], name: str, data: bytes, **form: Any) -> Any:
    body = multipart({"voice": "alloy", **form}, name, data)
    headers = {**auth, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    return client.post("/api/jobs/import", data=body, headers=headers)


def _error(resp: Any, status: int, fragment: str) -> None:
    assert resp.status_code == status, resp.get_data(as_text=True)
    body = resp.get_json()
    assert body["error"]["code"] in ("validation_error", "payload_too_large")
    assert fragment in body["error"]["message"]


def test_markdown_import_makes_chapters_and_items(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _import(
        client, auth, "novel.md", (FIXTURES / "novel.md").read_bytes(), max_characters="200"
    )
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    # Without a title, the document's first level-1 heading names the job.
    assert job["title"] == "Chapter One: The Harbour" and job["status"] == "PENDING"
    items = job["items"]
    assert squeeze(" ".join(i["text"] for i in items)) == squeeze(
        (FIXTURES / "novel.expected.txt").read_text()
    )
    assert all(len(i["text"]) <= 200 for i in items)
    chapters = job["chapters"]
    assert [c["title"] for c in chapters] == [
        "Chapter One: The Harbour",
        "Chapter One: The Harbour",
        "Chapter Two: At Sea",
    ]
    assert sum(c["items"] for c in chapters) == len(items)
    for chapter in chapters:
        first = items[chapter["first_position"] - 1]
        assert first["chapter"] == chapter["index"]
        inside = [i for i in items if i["chapter"] == chapter["index"]]
        assert len(inside) == chapter["items"]
    assert items[chapters[1]["first_position"] - 1]["text"] == "Chapter One: The Harbour"
    assert all(i["key"] is None for i in items)
    # The list's summaries carry the chapters too.
    summary = client.get("/api/jobs", headers=auth).get_json()["jobs"][0]
    assert summary["chapters"] == chapters


def test_epub_import_follows_the_table_of_contents(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _import(client, auth, "book.epub", build_epub(), title="  My Book ")
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    assert job["title"] == "My Book"
    assert [(c["title"], c["items"]) for c in job["chapters"]] == [
        ("The First Chapter", 2), ("Part B", 2), ("The Second Chapter", 2),
    ]  # fmt: skip
    assert squeeze(" ".join(i["text"] for i in job["items"])) == SPOKEN


def test_text_import_is_one_chapter(client: FlaskClient, auth: dict[str, str]) -> None:
    resp = _import(client, auth, "plain.txt", (FIXTURES / "plain.txt").read_bytes(), title="Plain")
    job = resp.get_json()
    assert resp.status_code == 201
    assert [(c["index"], c["title"], c["first_position"]) for c in job["chapters"]] == [
        (0, "Plain", 1)
    ]


def test_jobs_from_lines_have_no_chapters(client: FlaskClient, auth: dict[str, str]) -> None:
    resp = client.post(
        "/api/jobs", json={"title": "t", "voice": "alloy", "items": ["a"]}, headers=auth
    )
    job = resp.get_json()
    assert job["chapters"] == [] and job["items"][0]["chapter"] is None


@pytest.mark.parametrize(
    ("name", "data", "form", "fragment"),
    [
        ("book.pdf", b"%PDF-1.4", {}, "unsupported file type"),
        ("book.epub", b"PK\x03\x04 broken", {}, "not a readable EPUB"),
        ("empty.md", b"```\ncode only\n```\n![img](x.png)\n", {}, "no text"),
        ("notes.txt", b"hello", {"max_characters": "150"}, "max_characters"),
        ("notes.txt", b"hello", {"max_characters": "lots"}, "max_characters"),
        ("notes.txt", b"hello", {"voice": "nobody"}, "voice"),
    ],
)
def test_bad_uploads_answer_422(
    client: FlaskClient,
    auth: dict[str, str],
    name: str,
    data: bytes,
    form: dict[str, str],
    fragment: str,
) -> None:
    _error(_import(client, auth, name, data, **form), 422, fragment)


def test_a_document_of_too_many_items_says_how_many(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # 6,000 paragraphs of about 300 characters each: 200-character items cannot hold them.
    paragraph = ("word " * 60).strip() + "."
    data = "\n\n".join(paragraph for _ in range(6000)).encode()
    resp = _import(client, auth, "long.txt", data, max_characters="200")
    _error(resp, 422, "would make 12000 items")


def test_missing_file_answers_422(client: FlaskClient, auth: dict[str, str]) -> None:
    resp = client.post("/api/jobs/import", data={"voice": "alloy"}, headers=auth)
    _error(resp, 422, "file is required")


def test_an_upload_over_25_mib_answers_413(client: FlaskClient, auth: dict[str, str]) -> None:
    _error(_import(client, auth, "big.txt", b"a " * (13 * 1024 * 1024)), 413, "25 MiB")


def test_import_requires_authentication(client: FlaskClient) -> None:
    assert _import(client, {}, "a.txt", b"hello").status_code == 401
