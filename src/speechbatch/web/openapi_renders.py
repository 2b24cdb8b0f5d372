"""The renders' part of the OpenAPI document (``web/openapi.py`` merges it in)."""

from __future__ import annotations

from typing import Any

from speechbatch.domain import renders as rules
from speechbatch.domain.statuses import RenderStatus, values

# The document's own helpers: this module is imported by ``openapi.document`` when called.
from speechbatch.web.openapi import ID, TIMESTAMP
from speechbatch.web.openapi import _errors as errors
from speechbatch.web.openapi import _json as json_answer
from speechbatch.web.openapi import _nullable as nullable
from speechbatch.web.openapi import _path_id as path_id
from speechbatch.web.openapi import _ref as ref

URL = {"type": "string", "pattern": "^/api/"}
_BINARY = {"type": "string", "format": "binary"}


def _file(description: str, *content_types: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {content_type: {"schema": _BINARY} for content_type in content_types},
    }


# Every render answer carries all of these (null where they do not apply yet).
RENDER_KEYS = [
    "id", "job_id", "status", "format", "error_message", "duration_seconds", "chapters",
    "download_url", "captions", "created_at", "finished_at",
]  # fmt: skip

SCHEMAS: dict[str, Any] = {
    "RenderRequest": {
        "type": "object",
        "properties": {
            "format": {"enum": list(rules.FORMATS)},
            "gap_ms": {"type": "integer", "minimum": 0, "maximum": rules.GAP_MS_MAX},
            "chapter_gap_ms": {
                "type": "integer",
                "minimum": 0,
                "maximum": rules.CHAPTER_GAP_MS_MAX,
            },
            "loudness_lufs": nullable(
                {"type": "number", "minimum": rules.LOUDNESS_MIN, "maximum": rules.LOUDNESS_MAX}
            ),
        },
        "required": ["format"],
    },
    "Render": {
        "type": "object",
        "properties": {
            "id": ID,
            "job_id": ID,
            "status": {"enum": values(RenderStatus)},
            "format": {"enum": list(rules.FORMATS)},
            "error_message": nullable({"type": "string"}),
            "duration_seconds": nullable({"type": "number", "minimum": 0}),
            "chapters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "start_seconds": {"type": "number", "minimum": 0},
                        "end_seconds": {"type": "number", "minimum": 0},
                    },
                    "required": ["title", "start_seconds", "end_seconds"],
                },
            },
            "download_url": nullable(URL),
            "captions": nullable(
                {
                    "type": "object",
                    "properties": {"vtt": URL, "srt": URL},
                    "required": ["vtt", "srt"],
                }
            ),
            "created_at": TIMESTAMP,
            "finished_at": nullable(TIMESTAMP),
        },
        "required": RENDER_KEYS,
    },
    "RenderList": {
        "type": "object",
        "properties": {"renders": {"type": "array", "items": ref("Render")}},
        "required": ["renders"],
    },
}

_JOB = path_id("job_id", "job")
_RENDER = path_id("render_id", "render")
_BASE = "/api/jobs/{job_id}/renders"

PATHS: dict[str, Any] = {
    _BASE: {
        "parameters": [_JOB],
        "get": {
            "operationId": "listRenders",
            "summary": "A job's renders, newest first, after lease-expiry recovery.",
            "responses": {"200": json_answer("RenderList", "The renders."), **errors(401, 404)},
        },
        "post": {
            "operationId": "createRender",
            "summary": "Start one audio file of the whole job, with chapters and captions.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("RenderRequest")}},
            },
            "responses": {
                "202": json_answer("Render", "The RUNNING render."),
                # 409: job_not_complete (an item is not DONE) or render_in_progress.
                **errors(400, 401, 404, 409, 413, 422),
            },
        },
    },
    _BASE + "/{render_id}": {
        "parameters": [_JOB, _RENDER],
        "get": {
            "operationId": "getRender",
            "summary": "One render, after lease-expiry recovery.",
            "responses": {"200": json_answer("Render", "The render."), **errors(401, 404)},
        },
    },
    _BASE + "/{render_id}/download": {
        "parameters": [_JOB, _RENDER],
        "get": {
            "operationId": "downloadRender",
            "summary": "A COMPLETED render's audio (MP3 or M4B); 404 until then.",
            "responses": {
                "200": _file("The audio file.", *rules.CONTENT_TYPES.values()),
                **errors(401, 404),
            },
        },
    },
    _BASE + "/{render_id}/captions.vtt": {
        "parameters": [_JOB, _RENDER],
        "get": {
            "operationId": "renderCaptionsVtt",
            "summary": "A COMPLETED render's captions as WebVTT, one cue per item.",
            "responses": {"200": _file("WebVTT.", "text/vtt"), **errors(401, 404)},
        },
    },
    _BASE + "/{render_id}/captions.srt": {
        "parameters": [_JOB, _RENDER],
        "get": {
            "operationId": "renderCaptionsSrt",
            "summary": "A COMPLETED render's captions as SubRip, one cue per item.",
            "responses": {"200": _file("SubRip.", "application/x-subrip"), **errors(401, 404)},
        },
    },
}
