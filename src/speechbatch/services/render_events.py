"""A render as the outside sees it: its API view, and the webhook event that tells its end.

Both the builder (which ends a render COMPLETED or FAILED) and recovery (which declares a
dead one FAILED) record the event in the transaction that ends the render, so an end that
commits is always told and one that rolls back never is.
"""

from __future__ import annotations

from typing import Any

from speechbatch.adapters.repositories.renders import RenderRecord
from speechbatch.adapters.uow import WriteUnit
from speechbatch.domain.statuses import RenderStatus
from speechbatch.domain.webhooks import EventType

CAPTION_KINDS = {"vtt": "text/vtt", "srt": "application/x-subrip"}


def render_base_url(job_id: int, render_id: int) -> str:
    """The root-relative API path of a render."""
    return f"/api/jobs/{job_id}/renders/{render_id}"


def render_view(record: RenderRecord) -> dict[str, Any]:
    """A render as the API shows it."""
    base = render_base_url(record.job_id, record.id)
    completed = record.status == RenderStatus.COMPLETED
    return {
        "id": record.id,
        "job_id": record.job_id,
        "status": record.status,
        "format": record.format,
        "error_message": record.error_message,
        "duration_seconds": record.duration_seconds,
        "chapters": record.chapters,
        "download_url": f"{base}/download" if completed else None,
        "captions": {kind: f"{base}/captions.{kind}" for kind in CAPTION_KINDS}
        if completed
        else None,
        "created_at": record.created_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "preset": record.preset,
        "check": record.check_report if completed else None,
        "chapter_files_url": f"{base}/chapters.zip" if completed and record.zip_path else None,
    }


def record_render_event(uow: WriteUnit, record: RenderRecord) -> None:
    """Record ``render.completed`` or ``render.failed`` (``data.render``, the render as
    the API shows it) in the transaction that has just ended the render."""
    event = (
        EventType.RENDER_COMPLETED
        if record.status == RenderStatus.COMPLETED
        else EventType.RENDER_FAILED
    )
    uow.webhooks.record_event(record.organization_id, event, {"render": render_view(record)})
