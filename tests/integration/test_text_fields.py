"""Every text field of every call is text, on SQLite and PostgreSQL: a lone surrogate or
a NUL anywhere (a JSON body, a form, a multipart field, the query string) answers 422
naming the field, never a 500; a title needs a visible character; an id beyond 64 bits
answers 404."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.integration.test_pages import sign_in

SURROGATE = "\ud800"


def refused(answer: Any, field: str) -> None:
    assert answer.status_code == 422, answer.get_data(as_text=True)[:300]
    error = answer.get_json()["error"]
    assert error["code"] == "validation_error" and field in error["message"], error


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("put", "/api/lexicon", {"rules": [{"match": SURROGATE, "say": "x"}]}, "rules[0].match"),
        (
            "post",
            "/api/webhooks",
            {"url": "http://127.0.0.1:9/", "events": ["ping"], "description": SURROGATE},
            "description",
        ),
        (
            "post",
            "/api/jobs",
            {
                "title": "t",
                "voice": "alloy",
                "items": ["a"],
                "options": {"instructions": "x" + SURROGATE},
            },
            "options.instructions",
        ),
        ("post", "/api/lexicon/preview", {"text": "a" + SURROGATE}, "text"),
        (
            "post",
            "/api/jobs",
            {"title": "t", "voice": "alloy", "items": [{"text": "a", SURROGATE: 1}]},
            "a key",
        ),
    ],
)
def test_a_lone_surrogate_or_a_nul_in_a_json_body_answers_422_naming_the_field(
    client: FlaskClient, auth: dict[str, str], method: str, path: str, body: Any, field: str
) -> None:
    # These three answered 500 (the database or RE2 could not encode the text).
    refused(getattr(client, method)(path, json=body, headers=auth), field)


def test_a_nul_in_the_query_string_answers_422(client: FlaskClient, auth: dict[str, str]) -> None:
    refused(client.get("/api/jobs?q=a%00b", headers=auth), "q (query)")


def test_a_nul_in_a_form_or_a_multipart_field_answers_422(
    client: FlaskClient, auth: dict[str, str], admin: Any
) -> None:
    csrf = sign_in(client)
    page = client.post(
        "/jobs", data={"title": "t\x00", "voice": "alloy", "items": "a", "csrf_token": csrf}
    )
    assert page.status_code == 422 and "title contains a NUL" in page.get_data(as_text=True)
    upload = client.post(
        "/api/jobs/import",
        data={"voice": "alloy", "title": "t\x00", "file": (io.BytesIO(b"Hello."), "a.txt")},
        headers=auth,
        content_type="multipart/form-data",
    )
    refused(upload, "title")


@pytest.mark.parametrize("title", ["\u200b", "\u200b\u200d ", "\u0301"])
def test_a_title_needs_a_visible_character(
    client: FlaskClient, auth: dict[str, str], title: str
) -> None:
    answer = client.post(
        "/api/jobs", json={"title": title, "voice": "alloy", "items": ["a"]}, headers=auth
    )
    refused(answer, "title needs a visible character")
    made = client.post(
        "/api/jobs", json={"title": "\u200bé", "voice": "alloy", "items": ["a"]}, headers=auth
    )
    assert made.status_code == 201


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", "/api/webhooks/9223372036854775808"),
        ("get", "/api/jobs/99999999999999999999/items"),
        ("post", "/api/jobs/0/generate"),
        ("patch", "/api/webhooks/18446744073709551616"),
    ],
)
def test_an_id_beyond_64_bits_answers_404(
    client: FlaskClient, auth: dict[str, str], method: str, path: str
) -> None:
    answer = getattr(client, method)(path, headers=auth)
    assert answer.status_code == 404, answer.get_data(as_text=True)[:200]
    assert answer.get_json()["error"]["code"] == "not_found"


def test_a_multipart_part_whose_name_does_not_parse_is_not_a_500(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # A part named "\" (a quoted string that never ends) comes out of the parser named
    # None; schemathesis sent one and the text check answered 500.
    body = (
        b'--b\r\nContent-Disposition: form-data; name="\\"\r\n\r\n{}\r\n'
        b'--b\r\nContent-Disposition: form-data; name="voice"\r\n\r\nalloy\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
        b"Hello there.\r\n--b--\r\n"
    )
    answer = client.post(
        "/api/jobs/import",
        data=body,
        headers=auth,
        content_type="multipart/form-data; boundary=b",
    )
    assert answer.status_code == 201, answer.get_data(as_text=True)[:300]
    nul = body.replace(b"{}", b"a\x00b")
    refused(
        client.post(
            "/api/jobs/import",
            data=nul,
            headers=auth,
            content_type="multipart/form-data; boundary=b",
        ),
        "contains a NUL",
    )
