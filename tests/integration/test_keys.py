"""Items with keys on both databases: the API, CSV uploads, and the export's file names."""

from __future__ import annotations

import csv
import io
import zipfile
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.services import parse_items_csv
from tests.helpers import wait_for
from tests.integration.test_exports import download, start, wait_ended


def _create(client: FlaskClient, auth: dict[str, str], items: list[Any]) -> Any:
    return client.post(
        "/api/jobs", json={"title": "keys", "voice": "alloy", "items": items}, headers=auth
    )


def test_items_take_keys_and_plain_texts(client: FlaskClient, auth: dict[str, str]) -> None:
    resp = _create(
        client, auth, [{"text": " Welcome ", "key": " welcome_01 "}, "plain", {"text": "Bye"}]
    )
    assert resp.status_code == 201, resp.get_json()
    items = resp.get_json()["items"]
    assert [(i["text"], i["key"], i["chapter"]) for i in items] == [
        ("Welcome", "welcome_01", None), ("plain", None, None), ("Bye", None, None),
    ]  # fmt: skip
    job_id = resp.get_json()["id"]
    page = client.get(f"/api/jobs/{job_id}/items", headers=auth).get_json()
    assert [i["key"] for i in page["items"]] == ["welcome_01", None, None]


@pytest.mark.parametrize(
    ("items", "fragment"),
    [
        ([{"text": "a", "key": "dup"}, {"text": "b", "key": "dup"}], "used twice"),
        ([{"text": "a", "key": "has space"}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": ""}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": "k" * 101}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": "../etc"}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": 5}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": None}], "A-Z a-z 0-9"),
        ([{"text": "a", "key": "\u00a0k"}], "A-Z a-z 0-9"),
        ([{"text": "", "key": "k"}], "empty"),
        ([{"key": "k"}], "not a text"),
        ([{"text": "a", "key": "k", "extra": 1}], "other than text, key and speaker"),
    ],
)
def test_bad_keys_answer_422(
    client: FlaskClient, auth: dict[str, str], items: list[Any], fragment: str
) -> None:
    resp = _create(client, auth, items)
    assert resp.status_code == 422, resp.get_json()
    error = resp.get_json()["error"]
    assert error["code"] == "validation_error" and fragment in error["message"]


def test_a_key_may_repeat_across_jobs(client: FlaskClient, auth: dict[str, str]) -> None:
    for _ in range(2):
        assert _create(client, auth, [{"text": "a", "key": "same"}]).status_code == 201


def test_csv_with_a_text_and_key_header_takes_those_columns() -> None:
    content = 'id,key,text\n1,welcome_01,"Hello, there"\n2,,No key\n3,bye,Bye\n'
    assert parse_items_csv(content) == [
        {"text": "Hello, there", "key": "welcome_01"}, "No key", {"text": "Bye", "key": "bye"},
    ]  # fmt: skip


def test_csv_without_such_a_header_takes_the_first_column() -> None:
    assert parse_items_csv("first,ignored\nsecond\n") == ["first", "second"]


def test_export_names_keyed_items_by_key(client: FlaskClient, auth: dict[str, str]) -> None:
    created = _create(client, auth, [{"text": "Welcome", "key": "welcome_01"}, "second line"])
    job_id = created.get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    wait_for(
        lambda: client.get(f"/api/jobs/{job_id}", headers=auth).get_json()["status"] == "COMPLETED"
    )
    done = wait_ended(client, auth, start(client, auth)["id"])
    archive = zipfile.ZipFile(io.BytesIO(download(client, done["download_url"], auth)[2]))
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    keyed = next(row for row in manifest if row["key"] == "welcome_01")
    assert keyed["file_name"] == f"job-{job_id}/welcome_01.mp3"
    plain = next(row for row in manifest if row["text"] == "second line")
    assert plain["key"] == "" and plain["file_name"].startswith(f"job-{job_id}/0002-item-")
    assert set(archive.namelist()) == {"manifest.csv", *(r["file_name"] for r in manifest)}


def test_a_key_equal_to_another_items_file_name_makes_two_entries(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # In a fresh database the first item is item 1, whose file is 0001-item-1.mp3.
    created = _create(client, auth, ["first line", {"text": "second", "key": "0001-item-1"}])
    job = created.get_json()
    assert job["items"][0]["id"] == 1, "the key below names item 1's generated file"
    assert client.post(f"/api/jobs/{job['id']}/generate", headers=auth).status_code == 202
    wait_for(
        lambda: (
            client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()["status"] == "COMPLETED"
        )
    )
    done = wait_ended(client, auth, start(client, auth)["id"])
    assert done["status"] == "COMPLETED", done
    archive = zipfile.ZipFile(io.BytesIO(download(client, done["download_url"], auth)[2]))
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    names = archive.namelist()
    assert len(names) == len(set(names)) == 3
    entries = {row["text"]: row["file_name"] for row in manifest}
    assert entries["second"] == f"job-{job['id']}/0001-item-1.mp3"  # the key keeps its name
    assert entries["first line"] == f"job-{job['id']}/0001-item-1-2.mp3"
    # Each row names its own item's audio.
    for row in manifest:
        assert int(row["bytes"]) == len(archive.read(row["file_name"]))
