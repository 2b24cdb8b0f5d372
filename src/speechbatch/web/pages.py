"""Server-rendered admin pages: parse the form, call one service, render or redirect."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    current_app,
    flash,
    make_response,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from werkzeug.datastructures import FileStorage
from werkzeug.wrappers import Response

from speechbatch import services as svc
from speechbatch.domain.statuses import ItemStatus, JobStatus
from speechbatch.errors import Conflict, TooManySignIns, ValidationError
from speechbatch.services import UserRecord, accounts, sessions
from speechbatch.services.cast import cast_lines
from speechbatch.services.renders import list_renders
from speechbatch.web import presenters
from speechbatch.web.context import reads, services, session_user
from speechbatch.web.presenters import actions, format_when, percent, recovery_notice

bp = Blueprint("pages", __name__)
bp.add_app_template_filter(format_when, "when")
bp.add_app_template_filter(presenters.format_duration, "duration")

PER_PAGE = 20
STATUSES = (JobStatus.PENDING, JobStatus.GENERATING, JobStatus.COMPLETED, JobStatus.FAILED)
# A job page shows this many items at a time, so a 5,000-item job stays usable.
ITEMS_PER_PAGE = 100
ITEM_STATUSES = (ItemStatus.PENDING, ItemStatus.GENERATING, ItemStatus.DONE, ItemStatus.ERROR)
POLL_INTERVAL_MS = 1500
IDLE_POLL_INTERVAL_MS = 5000  # between runs: a run started elsewhere shows within 5 s
# The job page's filters by flag (stale and suspect items).
ITEM_FLAGS = ("stale", "suspect")

PageResponse = Response | str | tuple[str, int]


def login_required(view: Any) -> Any:
    """Send a visitor without a session to the login page, then back here."""

    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if session_user() is None:
            # Only a page can be returned to; a form's POST cannot be replayed by a GET.
            back = request.full_path.rstrip("?") if request.method == "GET" else None
            return redirect(url_for("pages.login", next=back))
        return view(*args, **kwargs)

    return wrapped


def current() -> UserRecord:
    """The signed-in user of this page (login_required guarantees one)."""
    user = session_user()
    assert user is not None
    return user


def safe_next(target: str | None) -> str:
    """A local path to go to after login; anything pointing elsewhere becomes ``/``."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return url_for("pages.index")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or any(c in target for c in "\r\n\\"):
        return url_for("pages.index")
    return target


# --- sign in and out ------------------------------------------------------------------


@bp.route("/login", methods=["GET", "POST"])
def login() -> PageResponse:
    """Sign in with email and password."""
    next_url = request.values.get("next", "")
    if request.method == "GET":
        if session_user() is not None:
            return redirect(safe_next(next_url))
        return render_template("login.html", email="", next=next_url, error=None)
    email = request.form.get("email", "").strip()
    password = request.form.get("password", "")
    try:
        user = (
            accounts.sign_in(services().uow_factory, email, password, request.remote_addr or "")
            if email
            else None
        )
    except TooManySignIns as exc:
        until = datetime.now(UTC) + timedelta(seconds=exc.retry_after_seconds)
        error = f"{exc.message} (after {until:%H:%M} UTC)"
        page = render_template("login.html", email=email, next=next_url, error=error)
        return make_response(page, 429, {"Retry-After": str(exc.retry_after_seconds)})
    if user is None:
        error = "Wrong email or password."
        return render_template("login.html", email=email, next=next_url, error=error), 401
    # A fresh session on sign-in: nothing from before the login survives (no fixation).
    session.clear()
    session["sid"] = sessions.start_session(services().uow_factory, user)
    session["email"] = user.email
    session.permanent = True
    return redirect(safe_next(next_url))


@bp.post("/logout")
def logout() -> Response:
    """Sign out: the session ends on the server, so a copy of its cookie signs in nobody."""
    if isinstance(secret := session.get("sid"), str):
        sessions.end_session(services().uow_factory, secret)
    session.clear()
    flash("You are signed out.", "ok")
    return redirect(url_for("pages.login"))


# --- jobs -----------------------------------------------------------------------------


# Far past any real page, and small enough that page x per-page fits a database integer.
MAX_PAGE_ARG = 1_000_000


def _int_arg(name: str, default: int) -> int:
    try:
        return min(MAX_PAGE_ARG, max(1, int(request.args.get(name, default))))
    except ValueError:
        return default


def _status_arg(allowed: tuple[str, ...]) -> str | None:
    """The ``status`` query argument if it is one of ``allowed`` (any case), else None."""
    status = (request.args.get("status") or "").strip().upper()
    return status if status in allowed else None


def _pages(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))


@bp.get("/")
@login_required
def index() -> PageResponse:
    """The organization's jobs, newest first, filtered by status and paginated."""
    s = services()
    status = _status_arg(STATUSES)
    page = _int_arg("page", 1)
    jobs, total = svc.list_jobs(
        s.uow_factory, s.settings, current(),
        status=status, page=page, per_page=PER_PAGE, reads=reads(),
    )  # fmt: skip
    return render_template(
        "jobs.html",
        jobs=jobs,
        total=total,
        status=status,
        statuses=STATUSES,
        page=page,
        pages=_pages(total, PER_PAGE),
        per_page=PER_PAGE,
        percent=percent,
        poll_ms=POLL_INTERVAL_MS,
        idle_poll_ms=IDLE_POLL_INTERVAL_MS,
    )


@dataclass(frozen=True)
class JobForm:
    """The values of the New job form, as typed (attributes: a template reading a missing
    key of a dict named ``items`` would find the dict's ``items`` method instead)."""

    title: str = ""
    voice: str = ""
    items: str = ""
    file_mode: str = "lines"
    max_characters: str = "1500"


def _voices() -> tuple[str, ...]:
    return tuple(services().provider.voices)


@bp.get("/jobs/new")
@login_required
def new_job() -> PageResponse:
    """The form of a new job."""
    voices = _voices()
    form = JobForm(voice=voices[0] if voices else "")
    return render_template("new_job.html", form=form, voices=voices, errors={})


def _upload_texts(upload: FileStorage) -> list[str | dict[str, str]]:
    """Items of an uploaded CSV (first column) or TXT (one per line) file."""
    raw = upload.read()
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValidationError("the file must be UTF-8 text (CSV or TXT)", field="file") from None
    name = (upload.filename or "").lower()
    is_csv = name.endswith(".csv") or (upload.mimetype or "") in ("text/csv", "application/csv")
    texts: list[str | dict[str, str]] = (
        svc.parse_items_csv(content) if is_csv else list(svc.parse_items_text(content))
    )
    if not texts:
        raise ValidationError("the file contains no items", field="file")
    return texts


def _form_texts(pasted: str, upload: FileStorage | None) -> list[str | dict[str, str]]:
    """Items from the pasted lines or the uploaded file (exactly one of them)."""
    pasted_texts = svc.parse_items_text(pasted)
    if upload is not None and upload.filename:
        if pasted_texts:
            raise ValidationError(
                "give the items either as lines or as a file, not both", field="items"
            )
        return _upload_texts(upload)
    if not pasted_texts:
        raise ValidationError(
            "enter at least one item (one per line) or upload a CSV/TXT file", field="items"
        )
    entries: list[str | dict[str, str]] = list(pasted_texts)
    return entries


def _is_document(form: JobForm, upload: FileStorage) -> bool:
    """Whether the upload is read as a document: Markdown and EPUB always, TXT on request."""
    name = (upload.filename or "").lower()
    if not name:
        return False
    if name.endswith((".md", ".markdown", ".epub")):
        return True
    return form.file_mode in ("document", "script") and not name.endswith(".csv")


def _create_from_form(form: JobForm, upload: FileStorage | None) -> int:
    """The new job's id, from the pasted lines, a lines file or a document."""
    s = services()
    if upload is not None and _is_document(form, upload):
        if svc.parse_items_text(form.items):
            raise ValidationError(
                "give the items either as lines or as a file, not both", field="items"
            )
        # The chapters ticked on the page (static/new-job.js lists them); absent: the default.
        chosen = request.form.getlist("chapters") if "chapters_listed" in request.form else None
        return svc.import_document(
            s.uow_factory, current(),
            filename=upload.filename or "", data=upload.read(), voice=form.voice,
            title=form.title if form.title.strip() else None,
            max_characters=form.max_characters, limits=s.limits, chapters=chosen,
            storage=s.storage, format="script" if form.file_mode == "script" else None,
        ).job_id  # fmt: skip
    texts = _form_texts(form.items, upload)
    return svc.create_job(s.uow_factory, current(), form.title, form.voice, texts, s.limits)


@bp.post("/jobs")
@login_required
def create_job() -> PageResponse:
    """Create a job from the form; show the errors next to the fields when invalid."""
    form = JobForm(
        title=request.form.get("title", ""),
        voice=request.form.get("voice", ""),
        items=request.form.get("items", ""),
        file_mode=request.form.get("file_mode", "lines"),
        max_characters=request.form.get("max_characters", "1500"),
    )
    try:
        job_id = _create_from_form(form, request.files.get("file"))
    except ValidationError as exc:
        errors = {exc.field or "form": exc.message}
        return render_template("new_job.html", form=form, voices=_voices(), errors=errors), 422
    flash("Job created. Press Generate to start sending its items.", "ok")
    return redirect(url_for("pages.job", job_id=job_id))


@bp.get("/jobs/<int:job_id>")
@login_required
def job(job_id: int) -> PageResponse:
    """One job: a page of its items with players, live progress, run history, the buttons."""
    s = services()
    status = _status_arg(ITEM_STATUSES)
    flag = request.args.get("flag") if request.args.get("flag") in ITEM_FLAGS else None
    status = None if flag else status
    page = _int_arg("page", 1)
    # The summary and the one page of items on screen: never the whole job, so the page
    # costs the same for 10 or 5,000 items (static/job-page.js then polls the same two reads).
    # One read transaction (the session's user lookup's) for both.
    view = svc.get_job_summary(s.uow_factory, s.settings, current(), job_id, reads=reads())
    items = svc.get_items_page(
        s.uow_factory, s.settings, current(), job_id,
        status=status, offset=(page - 1) * ITEMS_PER_PAGE, limit=ITEMS_PER_PAGE, reads=reads(),
        flag=flag,
    )  # fmt: skip
    items.update(
        page=page,
        pages=_pages(items["total"], ITEMS_PER_PAGE),
        per_page=ITEMS_PER_PAGE,
        status=status,
        flag=flag,
    )
    from speechbatch.services.feeds import feed_made_at
    from speechbatch.web.usage import job_estimates

    return render_template(
        "job.html",
        job=view,
        estimates=job_estimates(view),
        items=items,
        item_statuses=ITEM_STATUSES,
        can=actions(view),
        notice=recovery_notice(view),
        percent=percent,
        poll_ms=POLL_INTERVAL_MS,
        idle_poll_ms=IDLE_POLL_INTERVAL_MS,
        renders=list_renders(s.uow_factory, current(), job_id),
        feed_made_at=feed_made_at(s.uow_factory, current(), job_id),
        voices=_voices(),
        cast=cast_lines(s.uow_factory, current(), job_id),
    )


def _start(job_id: int, *, regenerate: bool) -> Response:
    s = services()
    try:
        view = svc.start_generation(
            s.uow_factory, s.settings, s.run_control, current(), job_id, regenerate=regenerate
        )
    except Conflict as exc:
        flash(exc.message, "error")
    else:
        what = "Regeneration" if regenerate else "Generation"
        # "started": shown like "ok", and static/job-page.js removes it once the run has ended.
        flash(f"{what} started (run {view['attempt']}).", "started")
    return redirect(url_for("pages.job", job_id=job_id))


@bp.post("/jobs/<int:job_id>/generate")
@login_required
def generate(job_id: int) -> Response:
    """Generate (or retry): send every item that has no audio yet."""
    return _start(job_id, regenerate=False)


@bp.post("/jobs/<int:job_id>/regenerate")
@login_required
def regenerate(job_id: int) -> Response:
    """Regenerate: send every item again (each is billed again)."""
    return _start(job_id, regenerate=True)


@bp.get("/favicon.ico")
def favicon() -> Response:
    """The site's icon where browsers and crawlers look without reading the page."""
    return current_app.send_static_file("favicon.svg")
