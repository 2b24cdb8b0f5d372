"""The ``Idempotency-Key`` header on the creating calls (``services/idempotency.py`` says
how a key creates at most once): the decorator, the request's fingerprint, and the
answer rebuilt from what a key created when its first request died before answering."""

from __future__ import annotations

import hashlib
import json
from functools import wraps
from typing import Any

from flask import Response, g, jsonify, make_response, request

from speechbatch import services as svc
from speechbatch.services import UserRecord, exports, renders
from speechbatch.services import idempotency as keys
from speechbatch.web.context import services

HEADER = "Idempotency-Key"
# On an answer that a repeat got from the first request (not made again).
REPLAYED_HEADER = "Idempotent-Replayed"
_FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")


def idempotent(view: Any) -> Any:
    """Run a creating POST at most once per organization and ``Idempotency-Key`` (after
    ``require_user``); without the header, as before."""

    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        raw = request.headers.get(HEADER)
        if raw is None or request.method != "POST":
            return view(*args, **kwargs)
        key = keys.check_key(raw)
        user: UserRecord = g.user

        def create(held: keys.KeyClaim) -> keys.Answer:
            g.idempotency = held
            response = make_response(view(*args, **kwargs))
            return keys.Answer(response.status_code, response.get_data(as_text=True))

        answer = keys.once(
            services().uow_factory,
            user.organization_id,
            key,
            fingerprint(),
            create=create,
            replay=lambda resource: _rebuilt(user, resource),
        )
        response = Response(answer.body, status=answer.status, mimetype="application/json")
        if answer.replayed:
            response.headers[REPLAYED_HEADER] = "true"
        return response

    return wrapped


def held_key() -> keys.KeyClaim | None:
    """This request's hold on its Idempotency-Key, for the creating service to bind."""
    held: keys.KeyClaim | None = g.get("idempotency")
    return held


def fingerprint() -> str:
    """SHA-256 of what makes two requests the same one: method, path, query and content
    (a JSON body as its data, whatever its spacing or key order; a form as its fields and
    each file's name and bytes, whatever the multipart boundary)."""
    digest = hashlib.sha256()

    def part(data: bytes) -> None:
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)

    for data in (request.method.encode(), request.path.encode(), request.query_string):
        part(data)
    if request.mimetype in _FORMS:
        for name, value in sorted(request.form.items(multi=True)):
            part(name.encode())
            part(value.encode("utf-8", "surrogatepass"))
        for name, upload in sorted(request.files.items(multi=True), key=lambda f: f[0]):
            part(name.encode())
            part((upload.filename or "").encode("utf-8", "surrogatepass"))
            part(_file_digest(upload.stream))
    else:
        part(_canonical(request.get_data(cache=True)))
    return digest.hexdigest()


def _file_digest(stream: Any) -> bytes:
    content = hashlib.sha256()
    for chunk in iter(lambda: stream.read(1024 * 1024), b""):
        content.update(chunk)
    stream.seek(0)  # the view reads the file again
    return content.digest()


def _canonical(body: bytes) -> bytes:
    """A JSON body as its data (sorted keys, no spacing); anything else as it is."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body
    try:
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return body
    return text.encode("utf-8", "surrogatepass")


def _rebuilt(user: UserRecord, resource: str) -> keys.Answer:
    """The answer of a creation whose request died before it answered: what the call
    would answer for it now (``job:ID`` 201, ``render:JOB:ID`` and ``export:ID`` 202)."""
    s = services()
    kind, _, ids = resource.partition(":")
    numbers = [int(n) for n in ids.split(":")]
    if kind == "job":
        view, status = svc.get_job(s.uow_factory, s.settings, user, numbers[0]), 201
    elif kind == "render":
        view, status = renders.get_render(s.uow_factory, user, numbers[0], numbers[1]), 202
    else:
        view, status = exports.get_export(s.uow_factory, user, numbers[0]), 202
    return keys.Answer(status, _json_text(view))


def _json_text(view: dict[str, Any]) -> str:
    response: Response = jsonify(view)
    return response.get_data(as_text=True)
