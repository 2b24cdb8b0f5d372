"""The document's podcast feed calls: a job's feed made and revoked (authenticated), and
the feed and its files, public under the feed's secret."""

from __future__ import annotations

from typing import Annotated, Any

from speechbatch.domain import renders as rules
from speechbatch.shapes import outputs
from speechbatch.shapes.schema import Schema
from speechbatch.web.openapi.operations import (
    NO_CONTENT,
    STORED_FILE,
    answer,
    download,
    errors,
    operation,
    path_id,
)

JOB_ID = path_id("job_id", "job")
RENDER_ID = path_id("render_id", "render")
SECRET = {
    "name": "secret",
    "in": "path",
    "required": True,
    "description": "The feed's secret, from the URL that made it.",
    "schema": Annotated[str, Schema(pattern="^[A-Za-z0-9_-]+$", maxLength=100)],
}
EXTENSION = {
    "name": "ext",
    "in": "path",
    "required": True,
    "description": "The file's extension, as the feed names it (the render's format).",
    "schema": Annotated[str, Schema(pattern="^(mp3|m4b)$")],
}
IMAGE_EXTENSION = {
    **EXTENSION,
    "description": "The cover's extension, as the feed names it.",
    "schema": Annotated[str, Schema(pattern="^[a-z]{3,4}$")],
}
NUMBER = {
    "name": "number",
    "in": "path",
    "required": True,
    "description": "The chapter file's number, from 1.",
    "schema": Annotated[int, Schema(minimum=1, maximum=10_000)],
}
FEED = "/feeds/{secret}"


def _public(operation_id: str, summary: str, ok: dict[str, Any], *parameters: Any) -> Any:
    """A public GET under the feed's secret (no sign-in)."""
    answers = {"200": ok, **STORED_FILE, **errors(404, 503)}
    return {
        "parameters": [SECRET, *parameters],
        "get": operation(operation_id, summary, answers, public=True),
    }


def _job_feed() -> dict[str, Any]:
    return {
        "/api/jobs/{job_id}/feed": {
            "parameters": [JOB_ID],
            "post": operation(
                "createFeed",
                "A new secret podcast feed URL for the job (replacing the one it had, whose "
                "URLs then answer 404): RSS 2.0 of its newest COMPLETED render.",
                {"201": answer(outputs.FeedCreated, "The feed's URL."), **errors(400, 401, 404)},
            ),
            "delete": operation(
                "deleteFeed",
                "Revoke the job's feed: its URLs answer 404.",
                {**NO_CONTENT, **errors(400, 401, 404)},
            ),
        },
    }


def _feed_files() -> dict[str, Any]:
    audio = download("The audio file.", *(rules.CONTENT_TYPES[f] for f in rules.AUDIO_FORMATS))
    chapters = download("Podcasting 2.0 JSON chapters.", "application/json+chapters")
    return {
        FEED + ".xml": _public(
            "getFeed",
            "The feed: RSS 2.0 with the iTunes and Podcasting 2.0 namespaces.",
            download("The feed.", "application/rss+xml"),
        ),
        FEED + "/cover.{ext}": _public(
            "getFeedCover",
            "The job's cover image (itunes:image).",
            download("The image.", "image/jpeg", "image/png"),
            IMAGE_EXTENSION,
        ),
        FEED + "/renders/{render_id}/audio.{ext}": _public(
            "getFeedAudio",
            "An episode's audio: a COMPLETED render's file.",
            audio,
            RENDER_ID,
            EXTENSION,
        ),
        FEED + "/renders/{render_id}/chapters/{number}.{ext}": _public(
            "getFeedChapterFile",
            "An episode's audio: one chapter file of a render that has them.",
            audio,
            RENDER_ID,
            NUMBER,
            EXTENSION,
        ),
        FEED + "/renders/{render_id}/chapters/{number}.vtt": _public(
            "getFeedChapterTranscript",
            "A chapter file's transcript: WebVTT timed as that file plays.",
            download("WebVTT.", "text/vtt"),
            RENDER_ID,
            NUMBER,
        ),
        FEED + "/renders/{render_id}/captions.vtt": _public(
            "getFeedTranscript",
            "An episode's transcript (podcast:transcript): WebVTT.",
            download("WebVTT.", "text/vtt"),
            RENDER_ID,
        ),
        FEED + "/renders/{render_id}/chapters.json": _public(
            "getFeedChapters",
            "An episode's chapters (podcast:chapters).",
            chapters,
            RENDER_ID,
        ),
    }


def feed_paths() -> dict[str, Any]:
    """Every feed call."""
    return {**_job_feed(), **_feed_files()}
