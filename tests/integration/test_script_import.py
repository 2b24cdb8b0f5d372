"""``"format": "script"`` imports on both databases: one item per line, ``NAME: text``
lines said by NAME, the others narration; Markdown headings open chapters; the 422s."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.helpers import view
from tests.integration.test_import_api import _error, _import
from tests.integration.test_pages import browser, text_of  # noqa: F401 (fixture)
from tests.integration.test_pages_import import _job_id, _post

SCRIPT = """# Act One
ALICE: Hello there, Bob.
The rain fell on the roof.

**Bob:** Hi! How are you?
*Dr. Watson*: Indeed: quite.
10:30 came and went.

## Act Two
Alice: Fine, thank you.
"""


def spoken(job: dict[str, Any]) -> list[tuple[str | None, str, int | None]]:
    return [(i["speaker"], i["text"], i["chapter"]) for i in job["items"]]


def test_a_markdown_script_makes_one_item_per_line_with_its_speaker(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    resp = _import(client, auth, "play.md", SCRIPT.encode(), format="script")
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    assert spoken(job) == [
        (None, "Act One", 0),
        ("ALICE", "Hello there, Bob.", 0),
        (None, "The rain fell on the roof.", 0),
        ("Bob", "Hi! How are you?", 0),
        ("Dr. Watson", "Indeed: quite.", 0),
        (None, "10:30 came and went.", 0),
        (None, "Act Two", 1),
        ("Alice", "Fine, thank you.", 1),
    ]
    assert [(c["title"], c["first_position"], c["items"]) for c in job["chapters"]] == [
        ("Act One", 1, 6), ("Act Two", 7, 2),
    ]  # fmt: skip
    assert job["cast"] == {}


def test_a_text_script_keeps_markup_and_cuts_a_long_line_for_one_speaker(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    long_line = "NARRATOR: " + " ".join(f"Sentence number {n} is here." for n in range(40))
    data = f"# Not a heading in TXT\n{long_line}\n".encode()
    resp = _import(client, auth, "play.txt", data, format="script", max_characters="200")
    assert resp.status_code == 201, resp.get_json()
    items = resp.get_json()["items"]
    assert items[0]["speaker"] is None and items[0]["text"] == "# Not a heading in TXT"
    rest = items[1:]
    assert len(rest) > 1 and all(i["speaker"] == "NARRATOR" for i in rest)
    assert all(len(i["text"]) <= 200 for i in rest)
    assert " ".join(i["text"] for i in rest) == long_line.removeprefix("NARRATOR: ")


@pytest.mark.parametrize(
    ("name", "data", "form", "fragment"),
    [
        ("play.txt", b"A: hi", {"format": "screenplay"}, "format must be"),
        ("play.txt", b"\n \n", {"format": "script"}, "no text"),
        ("play.epub", b"PK\x03\x04", {"format": "script"}, "a .txt or .md file"),
        ("play.txt", b"\xff\xfe bad", {"format": "script"}, "UTF-8"),
        ("play.txt", b"A: x\n" * 5001, {"format": "script"}, "5001 items"),
    ],
)
def test_bad_scripts_answer_422(
    client: FlaskClient, auth: dict[str, str], name: str, data: bytes, form: dict[str, str],
    fragment: str,
) -> None:  # fmt: skip
    _error(_import(client, auth, name, data, **form), 422, fragment)
    assert client.get("/api/jobs", headers=auth).get_json()["total"] == 0


@pytest.mark.parametrize("filename", ["play.txt", "play.md"])
def test_the_new_job_page_imports_a_script(
    browser: tuple[FlaskClient, str],  # noqa: F811
    svc: Services,
    admin: UserRecord,
    filename: str,
) -> None:
    client, token = browser
    assert 'id="file-mode-script"' in text_of(client.get("/jobs/new"))
    content = b"ALICE: Hello.\nThe door opened.\nBOB: Hi.\n"
    status, location = _post(client, token, filename, content, title="P", file_mode="script")
    assert status == 302, location
    job = view(svc, admin, _job_id(location))
    assert [(i["speaker"], i["text"]) for i in job["items"]] == [
        ("ALICE", "Hello."), (None, "The door opened."), ("BOB", "Hi."),
    ]  # fmt: skip
