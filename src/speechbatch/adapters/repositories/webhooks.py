"""Webhook endpoints and the outbox of their events.

``record_event`` is the one way an event is written: call it in the transaction of the
change it reports (a run's end, an export's, a render's), so the event commits or rolls
back with it and nothing that happened can be left untold. It writes the event and one
PENDING delivery per webhook of the organization subscribed to its type, enabled or not
(a disabled webhook's deliveries wait until it is enabled again).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from sqlalchemy import Table, delete, exists, insert, literal, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import Webhook, WebhookDelivery, WebhookEvent
from speechbatch.adapters.repositories.tables import COUNTERS, jobs, runs
from speechbatch.domain.statuses import JobStatus
from speechbatch.domain.webhooks import EventType

webhooks = cast(Table, Webhook.__table__)
webhook_events = cast(Table, WebhookEvent.__table__)
webhook_deliveries = cast(Table, WebhookDelivery.__table__)


@dataclass(frozen=True)
class WebhookRecord:
    """A webhook endpoint as stored (its secret included: only its creation shows it)."""

    id: int
    url: str
    events: list[str]
    description: str
    enabled: bool
    secret: str
    created_at: datetime


def _record(row: Any) -> WebhookRecord:
    return WebhookRecord(
        id=row.id,
        url=row.url,
        events=[e for e in row.events.split(",") if e],
        description=row.description,
        enabled=bool(row.enabled),
        secret=row.secret,
        created_at=row.created_at,
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


class Webhooks(Protocol):
    """What the webhook services need: endpoints, events, the delivery log."""

    def create_webhook(
        self, organization_id: int, url: str, events: list[str], description: str, secret: str
    ) -> WebhookRecord: ...
    def list_webhooks(self, organization_id: int) -> list[WebhookRecord]: ...
    def get_webhook(self, webhook_id: int, organization_id: int) -> WebhookRecord | None: ...
    def update_webhook(
        self, webhook_id: int, organization_id: int, values: dict[str, Any]
    ) -> WebhookRecord | None: ...
    def delete_webhook(self, webhook_id: int, organization_id: int) -> bool: ...
    def record_event(
        self,
        organization_id: int,
        event_type: str,
        data: dict[str, Any],
        *,
        webhook_id: int | None = None,
    ) -> str | None: ...


class WebhooksRepository:
    """Webhook endpoints of an organization, and the outbox, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create_webhook(
        self, organization_id: int, url: str, events: list[str], description: str, secret: str
    ) -> WebhookRecord:
        """Add an enabled webhook."""
        row = self.session.execute(
            insert(webhooks)
            .values(
                organization_id=organization_id,
                url=url,
                events="," + ",".join(events) + ",",
                description=description,
                secret=secret,
                enabled=True,
            )
            .returning(*webhooks.c)
        ).one()
        return _record(row)

    def list_webhooks(self, organization_id: int) -> list[WebhookRecord]:
        """The organization's webhooks, newest first."""
        rows = self.session.execute(
            select(webhooks)
            .where(webhooks.c.organization_id == organization_id)
            .order_by(webhooks.c.id.desc())
        ).all()
        return [_record(r) for r in rows]

    def get_webhook(self, webhook_id: int, organization_id: int) -> WebhookRecord | None:
        """One of the organization's webhooks, or None (another's is None too)."""
        row = self.session.execute(
            select(webhooks).where(
                webhooks.c.id == webhook_id, webhooks.c.organization_id == organization_id
            )
        ).first()
        return None if row is None else _record(row)

    def update_webhook(
        self, webhook_id: int, organization_id: int, values: dict[str, Any]
    ) -> WebhookRecord | None:
        """Change url, events (a list), description or enabled; None when not found."""
        values = dict(values)
        if "events" in values:
            values["events"] = "," + ",".join(values["events"]) + ","
        statement = update(webhooks).where(
            webhooks.c.id == webhook_id, webhooks.c.organization_id == organization_id
        )
        if values:
            row = self.session.execute(statement.values(**values).returning(*webhooks.c)).first()
            return None if row is None else _record(row)
        return self.get_webhook(webhook_id, organization_id)

    def delete_webhook(self, webhook_id: int, organization_id: int) -> bool:
        """Delete a webhook and its deliveries; whether it existed."""
        found = self.get_webhook(webhook_id, organization_id) is not None
        if found:
            self.session.execute(
                delete(webhook_deliveries).where(webhook_deliveries.c.webhook_id == webhook_id)
            )
            self.session.execute(delete(webhooks).where(webhooks.c.id == webhook_id))
        return found

    def record_event(
        self,
        organization_id: int,
        event_type: str,
        data: dict[str, Any],
        *,
        webhook_id: int | None = None,
    ) -> str | None:
        """Record an event in the caller's transaction, with one PENDING delivery per
        webhook of the organization subscribed to ``event_type`` (or, for a ping, to the
        one ``webhook_id``). Returns its ``webhook-id``, or None when no webhook wants
        it (then nothing is written: a run's end costs one statement without webhooks).
        """
        subscribers = webhooks.c.organization_id == organization_id
        if webhook_id is not None:
            subscribers = subscribers & (webhooks.c.id == webhook_id)
        else:
            subscribers = subscribers & webhooks.c.events.contains(f",{event_type},")
        message_id = "msg_" + uuid.uuid4().hex
        body = json.dumps(
            {"type": event_type, "timestamp": datetime.now(UTC).isoformat(), "data": data},
            separators=(",", ":"),
        )
        wanted = select(
            literal(organization_id), literal(message_id), literal(event_type), literal(body)
        ).where(exists().where(subscribers))
        event_id = self.session.execute(
            insert(webhook_events)
            .from_select(["organization_id", "message_id", "type", "body"], wanted)
            .returning(webhook_events.c.id)
        ).scalar_one_or_none()
        if event_id is None:
            return None
        self.session.execute(
            insert(webhook_deliveries).from_select(
                ["event_id", "webhook_id", "next_attempt_at"],
                select(literal(event_id), webhooks.c.id, db_now()).where(subscribers),
            )
        )
        return message_id

    def record_job_event(self, job_id: int, attempt: int) -> str | None:
        """Record ``job.completed`` or ``job.failed`` for the run at ``attempt`` that has
        just ended (in its transaction): ``data.job`` the job's summary, ``data.run`` the run."""
        row = self.session.execute(
            select(
                jobs,
                runs.c.kind,
                runs.c.outcome,
                runs.c.started_at.label("run_started_at"),
                runs.c.finished_at.label("run_finished_at"),
                runs.c.error_message.label("run_error_message"),
            )
            .select_from(jobs.join(runs, runs.c.job_id == jobs.c.id))
            .where(jobs.c.id == job_id, runs.c.attempt == attempt)
        ).first()
        if row is None or row.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
            return None
        event = (
            EventType.JOB_COMPLETED if row.status == JobStatus.COMPLETED else EventType.JOB_FAILED
        )
        return self.record_event(row.organization_id, event, _job_event_data(row, attempt))


def _job_event_data(row: Any, attempt: int) -> dict[str, Any]:
    """The job's summary (as the API shows it) and the run that ended."""
    counts = {str(status).lower(): getattr(row, col.key) for status, col in COUNTERS.items()}
    job = {
        "id": row.id,
        "title": row.title,
        "voice": row.voice,
        "status": row.status,
        "attempt": row.attempt,
        "error_message": row.error_message,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "progress": {"total": sum(counts.values()), **counts},
    }
    run = {
        "attempt": attempt,
        "kind": row.kind,
        "outcome": row.outcome,
        "started_at": _iso(row.run_started_at),
        "finished_at": _iso(row.run_finished_at),
        "error_message": row.run_error_message,
    }
    return {"job": job, "run": run}
