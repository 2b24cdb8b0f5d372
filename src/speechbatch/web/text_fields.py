"""Every text field of every call checked in one place, before any route sees it: the
strings of a JSON body (keys and values, however nested), of a form or multipart body
(fields and file names), of the query string and of the URL's own parts. One that holds
a NUL or a lone surrogate answers 422 naming the field; nothing else is judged here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Flask, request

from speechbatch.domain.text import text_problem
from speechbatch.errors import ValidationError

_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a parsed JSON value with where it is (``items[2].text``), keys
    included; iterative, so depth costs no stack."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, dict):
            for key, child in node.items():
                yield f"{where} (a key)" if where else "a key", key
                stack.append((child, f"{where}.{key}" if where else key))
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{n}]") for n, child in enumerate(node))


def _fields() -> Iterator[tuple[str, str]]:
    """The request's text fields, with their names."""
    for name, values in request.args.lists():
        yield f"{name} (query)", name
        yield from ((f"{name} (query)", v) for v in values)
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str):
            yield name, value
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if request.mimetype in _FORMS:
        # A part whose name does not parse (a broken quoted string) comes out named None.
        for name, values in request.form.lists():
            yield name or "", name or ""
            yield from ((name or "", v) for v in values)
        for name, upload in request.files.items(multi=True):
            yield f"{name or ''} (file name)", upload.filename or ""
    elif request.path.startswith("/api/"):
        # The API reads bodies as JSON whatever their content type (json_body); a body
        # that does not parse, or nests too deeply to, is the route's to refuse (400).
        try:
            body = request.get_json(silent=True, force=True)
        except RecursionError:
            return
        yield from _strings(body, "")


def check_text_fields() -> None:
    """Refuse (422) a request with a text field that is not text."""
    for name, value in _fields():
        problem = text_problem(value)
        if problem is not None:
            raise ValidationError(f"{name or 'the body'} {problem}", field=name or None)


def install(app: Flask) -> None:
    """Check every request's text fields before its route runs."""
    app.before_request(check_text_fields)
