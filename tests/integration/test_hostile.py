"""Hostile requests never get a 5xx."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"title": "t", "voice": "alloy", "items": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"title": "\\ud800", "voice": "alloy", "items": ["\\udfff"]}',
        b'{"title": 1e999, "voice": "alloy", "items": ["a"]}',
    ],
)
def test_hostile_json_is_a_4xx(client: FlaskClient, auth: dict[str, str], body: bytes) -> None:
    resp = client.post("/api/jobs", data=body, headers={**auth, "Content-Type": "application/json"})
    assert 400 <= resp.status_code < 500, resp.get_data(as_text=True)[:300]
    assert resp.get_json()["error"]["code"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs?status=NOPE",
        "/api/jobs/1/items/99999999999999999999999/audio",
        "/api/jobs/%00",
        "/api/jobs/1/generate/../../../etc/passwd",
        "/api/../../etc/passwd",
    ],
)
def test_odd_paths_are_a_4xx(client: FlaskClient, auth: dict[str, str], path: str) -> None:
    resp = client.get(path, headers=auth)
    assert 400 <= resp.status_code < 500


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer ", "Basic abc", "Bearer " + "x" * 10_000, "Bearer \x00", "bearer sb_x"],
)
def test_odd_authorization_headers_are_401(client: FlaskClient, header: str) -> None:
    resp = client.get("/api/jobs", headers={"Authorization": header})
    assert resp.status_code == 401
