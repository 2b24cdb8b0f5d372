"""Podcast feeds over HTTP: ``POST``/``DELETE /api/jobs/ID/feed`` (authenticated like the
rest of the API), the job page's two forms, and the feed with its files under
``/feeds/SECRET``: no sign-in, the secret in the path is the key. URLs in the feed are
absolute, made from the request's own scheme and host (behind a trusted proxy, what
``ProxyFix`` says the client asked for)."""

from __future__ import annotations

from flask import Blueprint, flash, jsonify, redirect, request, url_for
from werkzeug.wrappers import Response

from speechbatch.errors import NotFound, StorageUnreachable
from speechbatch.services import feeds as svc
from speechbatch.web.api import current, require_user
from speechbatch.web.context import services, session_user
from speechbatch.web.downloads import negotiated, stored_file, streamed

bp = Blueprint("feeds", __name__)

FEED = "/feeds/<secret>"


def _origin() -> str:
    return request.host_url.rstrip("/")


@bp.route("/api/jobs/<int:job_id>/feed", methods=["POST", "DELETE"])
@require_user
def job_feed(job_id: int) -> tuple[Response, int] | Response:
    """POST: a new secret feed URL for the job (201; replaces the one it had). DELETE:
    revoke it (204; 404 without one)."""
    s = services()
    if request.method == "DELETE":
        svc.close_feed(s.uow_factory, current(), job_id)
        return Response(status=204)
    secret = svc.open_feed(s.uow_factory, current(), job_id)
    return jsonify({"url": _origin() + svc.feed_path(secret)}), 201


@bp.post("/jobs/<int:job_id>/feed")
def new_feed(job_id: int) -> Response:
    """The job page's Feed form: a new feed URL, shown once in the page's message."""
    user = session_user()
    if user is None:
        return redirect(url_for("pages.login"))
    secret = svc.open_feed(services().uow_factory, user, job_id)
    url = _origin() + svc.feed_path(secret)
    flash(f"Podcast feed (copy it now: it is shown once): {url}", "ok")
    # To the page's top, where the message is: not to the renders section.
    return redirect(url_for("pages.job", job_id=job_id))


@bp.post("/jobs/<int:job_id>/feed/revoke")
def revoke_feed(job_id: int) -> Response:
    """The job page's form that turns the feed off."""
    user = session_user()
    if user is None:
        return redirect(url_for("pages.login"))
    try:
        svc.close_feed(services().uow_factory, user, job_id)
    except NotFound as exc:
        flash(exc.message, "error")
    else:
        flash("Podcast feed revoked: its URL no longer works.", "ok")
    return redirect(url_for("pages.job", job_id=job_id))


@bp.get(FEED + ".xml")
def feed(secret: str) -> Response:
    """The feed: RSS 2.0 of the job's newest COMPLETED render (404 once revoked)."""
    s = services()
    try:
        document = svc.feed_document(s.uow_factory, s.storage, secret, _origin())
    except FileNotFoundError:
        raise NotFound("the render's file is missing") from None
    except OSError:
        raise StorageUnreachable() from None
    response = Response(document, mimetype=negotiated(svc.FEED_TYPE))
    response.headers["Cache-Control"] = "private, no-cache"
    return response


@bp.get(FEED + "/cover.<ext>")
def feed_cover(secret: str, ext: str) -> Response:
    """The job's cover, for ``itunes:image``."""
    s = services()
    key, mime = svc.feed_cover(s.uow_factory, secret)
    return stored_file(s, key, mimetype=mime, download_name=f"cover.{ext}")


@bp.get(FEED + "/renders/<int:render_id>/audio.<any(mp3, m4b):ext>")
def feed_audio(secret: str, render_id: int, ext: str) -> Response:
    """An episode's audio: the render's whole file (ranges served)."""
    s = services()
    key, mime, name = svc.feed_file(s.uow_factory, secret, render_id, "audio")
    return stored_file(s, key, mimetype=mime, download_name=name)


@bp.get(FEED + "/renders/<int:render_id>/captions.vtt")
def feed_transcript(secret: str, render_id: int) -> Response:
    """An episode's transcript (``podcast:transcript``): the render's WebVTT."""
    s = services()
    key, mime, name = svc.feed_file(s.uow_factory, secret, render_id, "vtt")
    return stored_file(s, key, mimetype=mime, download_name=name)


@bp.get(FEED + "/renders/<int:render_id>/chapters.json")
def feed_chapters(secret: str, render_id: int) -> Response:
    """An episode's chapters (``podcast:chapters``) as Podcasting 2.0 JSON chapters."""
    body = svc.feed_chapters(services().uow_factory, secret, render_id)
    response = jsonify(body)
    response.mimetype = negotiated(svc.CHAPTERS_TYPE)
    return response


@bp.get(FEED + "/renders/<int:render_id>/chapters/<int:number>.<any(mp3, m4b):ext>")
def feed_chapter_file(secret: str, render_id: int, number: int, ext: str) -> Response:
    """One chapter file (from 1) of a render that has them: one episode's audio."""
    s = services()
    try:
        source, mime, name = svc.feed_chapter_file(
            s.uow_factory, s.storage, secret, render_id, number
        )
    except FileNotFoundError:
        raise NotFound("the render's chapter files are missing") from None
    except OSError:
        raise StorageUnreachable() from None
    return streamed(
        source, mimetype=mime, download_name=name, version=f"render-{render_id}-chapter-{number}"
    )


@bp.get(FEED + "/renders/<int:render_id>/chapters/<int:number>.vtt")
def feed_chapter_transcript(secret: str, render_id: int, number: int) -> Response:
    """One chapter file's transcript (WebVTT, timed as that file plays)."""
    s = services()
    try:
        text = svc.feed_chapter_transcript(s.uow_factory, s.storage, secret, render_id, number)
    except FileNotFoundError:
        raise NotFound("the render's captions are missing") from None
    except OSError:
        raise StorageUnreachable() from None
    return Response(text, mimetype="text/vtt")
