"""An export as the outside sees it: its API view, and the webhook event that tells its end.

The builder (which ends an export COMPLETED or FAILED) and recovery (which declares a dead
one FAILED) record the event in the transaction that ends the export, and only when their
compare-and-set won: an end that commits is told once, one that rolls back never.
"""

from __future__ import annotations

from typing import Any

from speechbatch.adapters.repositories.exports import ExportRecord
from speechbatch.adapters.uow import WriteUnit
from speechbatch.domain.statuses import ExportStatus
from speechbatch.domain.webhooks import EventType


def download_url(export_id: int) -> str:
    """The root-relative API path of an export's archive."""
    return f"/api/exports/{export_id}/download"


def export_view(record: ExportRecord) -> dict[str, Any]:
    """An export as the API shows it."""
    completed = record.status == ExportStatus.COMPLETED
    return {
        "id": record.id,
        "status": record.status,
        "error_message": record.error_message,
        "download_url": download_url(record.id) if completed else None,
        "created_at": record.created_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }


def record_export_event(uow: WriteUnit, organization_id: int, export_id: int) -> None:
    """Record ``export.completed`` or ``export.failed`` (``data.export``, the export as
    the API shows it) in the transaction that has just ended the export."""
    record = uow.exports.get_export(export_id, organization_id)
    if record is None:
        return
    event = (
        EventType.EXPORT_COMPLETED
        if record.status == ExportStatus.COMPLETED
        else EventType.EXPORT_FAILED
    )
    uow.webhooks.record_event(organization_id, event, {"export": export_view(record)})
