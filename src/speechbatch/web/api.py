"""The JSON API: parse the request, call one service, answer JSON."""

from __future__ import annotations

from functools import wraps
from typing import Any, ParamSpec, TypeVar

from flask import Blueprint, Response, g, jsonify, request
from flask_wtf.csrf import ValidationError as CSRFValidationError
from flask_wtf.csrf import validate_csrf
from werkzeug.wrappers import Response as BaseResponse
from werkzeug.wrappers import Response as WerkzeugResponse

from speechbatch import services as svc
from speechbatch.errors import BadRequest, Unauthorized, ValidationError
from speechbatch.services import UserRecord
from speechbatch.web.context import bearer_token, bearer_user, reads, services, session_user
from speechbatch.web.downloads import stored_file
from speechbatch.web.errors import error_response
from speechbatch.web.idempotency import held_key, idempotent

bp = Blueprint("api", __name__)
P = ParamSpec("P")
R = TypeVar("R")


def require_user(view: Any) -> Any:
    """Authenticate by bearer token or browser session (with CSRF on writes)."""

    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        user = bearer_user()
        if user is None and not request.headers.get("Authorization"):
            user = session_user()
            if user is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
                try:
                    validate_csrf(request.headers.get("X-CSRFToken", ""))
                except CSRFValidationError as exc:
                    raise BadRequest(f"CSRF check failed: {exc}") from None
        if user is None:
            raise Unauthorized(svc.AUTHENTICATION_REQUIRED)
        g.user = user
        return view(*args, **kwargs)

    return wrapped


def poller(view: Any) -> Any:
    """Like ``require_user`` for reads of one job, but a bearer token is looked up by the
    read's own statement (one round trip): the view gets ``who``, a token or a user."""

    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        token = bearer_token()
        who: UserRecord | svc.Bearer | None = svc.Bearer(token) if token else None
        if who is None and not request.headers.get("Authorization"):
            who = session_user()
        if who is None:
            raise Unauthorized(svc.AUTHENTICATION_REQUIRED)
        return view(*args, who=who, **kwargs)

    return wrapped


def current() -> UserRecord:
    """The authenticated user of this API call."""
    return g.user


def json_body() -> dict[str, Any]:
    try:
        body = request.get_json(silent=True, force=True)
    except RecursionError:
        raise BadRequest("the JSON is nested too deeply") from None
    if body is None:
        raise BadRequest("the body must be JSON")
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    """Liveness with a database round trip."""
    if not svc.database_is_up(services().uow_factory):
        return error_response(503, "unavailable", "the database is unreachable")
    return jsonify({"status": "ok"}), 200


@bp.get("/api/voices")
@require_user
def voices() -> Response:
    """The enabled providers' voices, with their details."""
    s = services()
    return jsonify({"voices": list(s.provider.voices), "details": s.voice_details()})


def _int_arg(name: str) -> int | None:
    """An integer query parameter, None when absent; 422 when it is not an integer."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValidationError(f"{name} must be an integer", field=name) from None


def _conditional(answer: svc.Conditional) -> Response:
    """200 with the JSON text built by the database, or 304 with no body; both with ETag."""
    if answer.not_modified:
        response = Response(status=304)
    else:
        response = Response(answer.body, mimetype="application/json")
    response.set_etag(answer.etag)
    return response


def _seen(etag: str) -> bool:
    return request.if_none_match.contains_weak(etag)


def _seen_etags() -> frozenset[str]:
    """The client's If-None-Match ETags (strong and weak), for the database to compare.

    An empty quoted ETag (``If-None-Match: ""``) parses as None: it names nothing."""
    return frozenset(tag for tag in request.if_none_match.as_set(include_weak=True) if tag)


@bp.get("/api/jobs")
@require_user
def list_jobs() -> Response:
    """The organization's jobs, newest first, paginated, after recovery (ETag, 304)."""
    s = services()
    answer = svc.read_jobs(
        reads(),
        s.uow_factory,
        s.settings,
        current(),
        status=request.args.get("status") or None,
        page=_int_arg("page"),
        per_page=_int_arg("per_page"),
        if_none_match=_seen,
        q=request.args.get("q"),
    )
    return _conditional(answer)


@bp.post("/api/jobs")
@require_user
@idempotent
def create_job() -> tuple[Response, int]:
    """Create a PENDING job (once per Idempotency-Key)."""
    s = services()
    body = json_body()
    if "options" in body and not isinstance(body["options"], dict):
        raise ValidationError("options must be an object", field="options")
    job_id = svc.create_job(
        s.uow_factory, current(), body.get("title"), body.get("voice"), body.get("items"),
        s.limits, body.get("options", {}), body.get("author"), idempotency=held_key(),
        cast=body.get("cast"),
    )  # fmt: skip
    return jsonify(svc.get_job(s.uow_factory, s.settings, current(), job_id)), 201


@bp.post("/api/jobs/import")
@require_user
@idempotent
def import_job() -> tuple[Response, int]:
    """Create a PENDING job from an uploaded document or script (multipart: file, voice,
    title, author, max_characters, chapters, format), once per Idempotency-Key; the
    answer lists every chapter of the document and whether it was kept."""
    s = services()
    filename, data = _uploaded_document()
    imported = svc.import_document(
        s.uow_factory, current(),
        filename=filename, data=data,
        voice=request.form.get("voice"), title=request.form.get("title"),
        max_characters=request.form.get("max_characters"), limits=s.limits,
        chapters=request.form.getlist("chapters") if "chapters" in request.form else None,
        author=request.form.get("author"), storage=s.storage, idempotency=held_key(),
        format=request.form.get("format"),
    )  # fmt: skip
    job = svc.get_job(s.uow_factory, s.settings, current(), imported.job_id)
    return jsonify({**job, "document": imported.document}), 201


@bp.post("/api/jobs/import/chapters")
@require_user
def import_choices() -> Response:
    """What an upload would import (multipart: file): the document's own title and
    author, and its chapters with whether the default choice keeps them. Stores nothing."""
    filename, data = _uploaded_document()
    return jsonify(svc.read_choices(filename, data))


def _uploaded_document() -> tuple[str, bytes]:
    upload = request.files.get("file")
    if upload is not None:
        return upload.filename or "", upload.read()
    if "file" in request.form:  # sent as a plain form field: the document's text
        return "", request.form["file"].encode()
    raise ValidationError("file is required (a .txt, .md or .epub document)", field="file")


@bp.get("/api/jobs/<int:job_id>")
@poller
def get_job(job_id: int, who: UserRecord | svc.Bearer) -> Response:
    """One job, after lease-expiry recovery; ``?items=none`` leaves the items out."""
    s = services()
    items = request.args.get("items")
    if items not in (None, "all", "none"):
        raise ValidationError("items must be 'none' or 'all' (or absent)", field="items")
    answer = svc.read_job(
        reads(), s.uow_factory, s.settings, who, job_id,
        with_items=items != "none", if_none_match=_seen, seen_etags=_seen_etags(),
    )  # fmt: skip
    return _conditional(answer)


@bp.get("/api/jobs/<int:job_id>/items")
@poller
def job_items(job_id: int, who: UserRecord | svc.Bearer) -> Response:
    """A page of a job's items (``status``, ``offset``, ``limit``; ``stale=1`` or
    ``suspect=1``) with the total."""
    s = services()
    flags = [flag for flag in ("stale", "suspect") if flag_arg(flag)]
    answer = svc.read_job_items(
        reads(), s.uow_factory, s.settings, who, job_id,
        status=request.args.get("status") or None,
        offset=_int_arg("offset"), limit=_int_arg("limit"),
        if_none_match=_seen, seen_etags=_seen_etags(), flag="+".join(flags) or None,
    )  # fmt: skip
    return _conditional(answer)


def flag_arg(name: str) -> bool:
    """A yes/no query parameter: ``1`` or ``0`` (absent: no); 422 for anything else."""
    raw = request.args.get(name)
    if raw is None or raw == "0":
        return False
    if raw == "1":
        return True
    raise ValidationError(f"{name} must be 1 or 0", field=name)


def _generate(
    job_id: int, regenerate: bool, selection: svc.Selection | None = None
) -> tuple[Response, int]:
    s = services()
    view = svc.start_generation(
        s.uow_factory, s.settings, s.run_control, current(), job_id,
        regenerate=regenerate, selection=selection,
    )  # fmt: skip
    return jsonify(view), 202


def _selection() -> svc.Selection | None:
    """A regenerate's optional body: ``{"items": [ITEM...]}`` or ``{"stale": true}``."""
    if not request.get_data(cache=True).strip():
        return None
    body = json_body()
    if "items" in body and "stale" in body:
        raise ValidationError("give items or stale, not both", field="items")
    if "items" in body and body["items"] is None:
        raise ValidationError("items must be a list of item ids", field="items")
    if "stale" in body and not isinstance(body["stale"], bool):
        raise ValidationError("stale must be true or false", field="stale")
    return svc.selection_of(body.get("items"), body.get("stale", False))


@bp.post("/api/jobs/<int:job_id>/generate")
@require_user
def generate(job_id: int) -> tuple[Response, int]:
    """Claim the job and send every item that is not DONE."""
    return _generate(job_id, regenerate=False)


@bp.post("/api/jobs/<int:job_id>/regenerate")
@require_user
def regenerate(job_id: int) -> tuple[Response, int]:
    """Claim the job and send every item again, or only a selection of them."""
    return _generate(job_id, regenerate=True, selection=_selection())


@bp.get("/api/jobs/<int:job_id>/items/<int:item_id>/audio")
@require_user
def item_audio(job_id: int, item_id: int) -> BaseResponse:
    """An item's audio bytes."""
    s = services()
    key = svc.item_audio_key(s.uow_factory, current(), job_id, item_id, reads=reads())
    return send_audio(key, f"job{job_id}-item{item_id}")


def send_audio(key: str, name: str) -> WerkzeugResponse:
    """A stored audio file, downloaded as ``name`` with the provider's extension."""
    s = services()
    return stored_file(
        s,
        key,
        mimetype=s.provider.content_type,
        download_name=f"{name}.{s.provider.file_extension}",
        missing="the audio file is missing",
    )
