"""Takes: every audio an item has had, numbered from 1 per item; the newest are kept.

A DONE move (a sent finish or a reuse) records the item's new audio as its next take
in the same fenced transaction, makes it the current one and drops the takes beyond
the kept number; the caller deletes the audio of a dropped take once committed, when
nothing refers to it any more (``unreferenced``). A restore makes a kept take current
again, under the job row's lock like every writer of items.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import ColumnElement, Table, Text, and_, exists, func, insert, literal, select
from sqlalchemy.orm import Session

from speechbatch.adapters.models import Take
from speechbatch.adapters.repositories.tables import item_voice, items, jobs

takes = cast(Table, Take.__table__)
# What a take keeps of the item's audio, and gives back when it is restored.
AUDIO_COLUMNS = (
    "audio_path",
    "audio_bytes",
    "audio_sha256",
    "fingerprint",
    "duration_seconds",
    "suspect",
    "reused",
)
_OTHER = takes.alias("other")


@dataclass(frozen=True)
class TakeRow:
    """One kept take, as the takes list shows it."""

    take: int
    text: str
    spoken_text: str
    voice: str
    audio_path: str
    duration_seconds: float | None
    suspect: str | None
    reused: bool
    created_at: Any
    current: bool


@dataclass(frozen=True)
class CurrentTiming:
    """The item's current audio: what it says, how long it lasts, and its stored timing
    (JSON; None when it was never measured)."""

    spoken_text: str
    duration_seconds: float | None
    timing: str | None


def take_number(item_id: int | ColumnElement[int], audio_path: Any) -> ColumnElement[int]:
    """The number of the item's take of ``audio_path``: its existing take (a retried
    finish), else the item's next number. A DONE move sets ``current_take`` to it."""
    existing = (
        select(_OTHER.c.take)
        .where(_OTHER.c.item_id == item_id, _OTHER.c.audio_path == audio_path)
        .scalar_subquery()
    )
    newest = select(func.max(_OTHER.c.take)).where(_OTHER.c.item_id == item_id).scalar_subquery()
    return func.coalesce(existing, func.coalesce(newest, 0) + 1)


class TakeMoves:
    """Takes over one session; every method runs under the job row's lock that the
    caller took first (a fence or an edit)."""

    session: Session

    def record_take(
        self,
        item_id: int,
        spoken_text: str | None,
        keep: int,
        number: int | None,
        timing: str | None = None,
    ) -> list[str]:
        """Record the item's current audio as its take ``number`` (the item's DONE move
        set ``current_take`` to it, see ``take_number``) with the item's text, its voice
        (its speaker's, else the job's), the job's options, ``spoken_text`` (what was
        sent; None: the text) and its ``timing`` (JSON; None: not measured), once (the
        same audio again, a retried commit, records nothing new); drop the takes beyond
        the newest ``keep``: answer their audio keys."""
        already = exists().where(
            _OTHER.c.item_id == item_id, _OTHER.c.audio_path == items.c.audio_path
        )
        self.session.execute(
            insert(takes).from_select(
                [
                    "item_id",
                    "take",
                    "text",
                    "spoken_text",
                    "voice",
                    "options",
                    "timing",
                    *AUDIO_COLUMNS,
                ],
                select(
                    items.c.id,
                    items.c.current_take,
                    items.c.text,
                    items.c.text if spoken_text is None else literal(spoken_text),
                    item_voice(),
                    jobs.c.options,
                    literal(timing, Text()),
                    *(items.c[name] for name in AUDIO_COLUMNS),
                )
                .join_from(items, jobs, jobs.c.id == items.c.job_id)
                .where(items.c.id == item_id, items.c.audio_path.is_not(None), ~already),
            )
        )
        if number is None or number <= keep:
            return []
        dropped: Sequence[str] = (
            self.session.execute(
                takes.delete()
                .where(takes.c.item_id == item_id, takes.c.take <= number - keep)
                .returning(takes.c.audio_path)
            )
            .scalars()
            .all()
        )
        return list(dropped)

    def unreferenced(self, keys: Iterable[str | None], *, keep: str | None = None) -> list[str]:
        """Which of these audio keys no item and no kept take refers to any more (other
        than ``keep``, the audio just written): the caller deletes them once committed."""
        found: list[str] = []
        for key in dict.fromkeys(k for k in keys if k is not None and k != keep):
            item_ref = exists().where(items.c.audio_path == key)
            take_ref = exists().where(takes.c.audio_path == key)
            if not self.session.execute(select(item_ref | take_ref)).scalar_one():
                found.append(key)
        return found


class Takes(Protocol):
    """What the read services need of takes."""

    def has_item(self, job_id: int, item_id: int, organization_id: int) -> bool: ...
    def item_row(
        self, job_id: int, item_id: int, organization_id: int
    ) -> dict[str, Any] | None: ...
    def item_takes(self, item_id: int, keep: int) -> list[TakeRow]: ...
    def take_audio(self, item_id: int, take: int, keep: int) -> str | None: ...
    def current_timing(self, item_id: int) -> CurrentTiming | None: ...
    def selected_lines(
        self, job_id: int, organization_id: int, item_ids: Sequence[int] | None, limit: int
    ) -> tuple[list[dict[str, Any]], int]: ...


class TakeReads:
    """Reads of takes, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def has_item(self, job_id: int, item_id: int, organization_id: int) -> bool:
        """Whether the item is one of the organization's job's items."""
        return (
            self.session.execute(
                select(items.c.id)
                .join(jobs, jobs.c.id == items.c.job_id)
                .where(
                    items.c.id == item_id,
                    items.c.job_id == job_id,
                    jobs.c.organization_id == organization_id,
                )
            ).first()
            is not None
        )

    def item_row(self, job_id: int, item_id: int, organization_id: int) -> dict[str, Any] | None:
        """One item of the organization's job as the item page shows it, or None."""
        row = self.session.execute(
            select(
                items.c.id,
                items.c.position,
                items.c.text,
                items.c.speaker,
                items.c.status,
                items.c.stale,
                items.c.suspect,
                items.c.duration_seconds,
                items.c.error_message,
                items.c.audio_path.is_not(None).label("has_audio"),
            )
            .join(jobs, jobs.c.id == items.c.job_id)
            .where(
                items.c.id == item_id,
                items.c.job_id == job_id,
                jobs.c.organization_id == organization_id,
            )
        ).first()
        return None if row is None else dict(row._mapping)

    def item_takes(self, item_id: int, keep: int) -> list[TakeRow]:
        """The item's kept takes, newest first (at most ``keep``)."""
        rows = self.session.execute(
            select(takes, items.c.current_take, items.c.audio_path.label("item_audio"))
            .join(items, items.c.id == takes.c.item_id)
            .where(takes.c.item_id == item_id)
            .order_by(takes.c.take.desc())
            .limit(keep)
        ).all()
        return [
            TakeRow(
                r.take,
                r.text,
                r.spoken_text,
                r.voice,
                r.audio_path,
                r.duration_seconds,
                r.suspect,
                bool(r.reused),
                r.created_at,
                r.current_take == r.take and r.item_audio == r.audio_path,
            )
            for r in rows
        ]

    def take_audio(self, item_id: int, take: int, keep: int) -> str | None:
        """The audio key of one kept take of an item (among its newest ``keep``), or None."""
        newest = (
            select(func.max(_OTHER.c.take)).where(_OTHER.c.item_id == item_id).scalar_subquery()
        )
        return self.session.execute(
            select(takes.c.audio_path).where(
                and_(takes.c.item_id == item_id, takes.c.take == take, takes.c.take > newest - keep)
            )
        ).scalar_one_or_none()

    def current_timing(self, item_id: int) -> CurrentTiming | None:
        """The timing of the item's current take (None when the item has no audio). A
        take that shares its audio (a reuse) has the timing of the take that made it."""
        row = self.session.execute(
            select(takes.c.spoken_text, takes.c.duration_seconds, takes.c.timing)
            .join(items, items.c.id == takes.c.item_id)
            .where(
                takes.c.item_id == item_id,
                takes.c.take == items.c.current_take,
                takes.c.audio_path == items.c.audio_path,
            )
        ).first()
        if row is None:
            return None
        timing = row.timing
        if timing is None:
            timing = self.session.execute(
                select(_OTHER.c.timing)
                .join(items, items.c.audio_path == _OTHER.c.audio_path)
                .where(items.c.id == item_id, _OTHER.c.timing.is_not(None))
                .limit(1)
            ).scalar_one_or_none()
        return CurrentTiming(row.spoken_text, row.duration_seconds, timing)

    def selected_lines(
        self, job_id: int, organization_id: int, item_ids: Sequence[int] | None, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The first ``limit`` lines (position, key, text, status, stale) of the
        organization's job that a selection names, in position order, and how many it
        names in all: the items ``item_ids``, or (None) every stale item."""
        chosen = items.c.stale.is_(True) if item_ids is None else items.c.id.in_(list(item_ids))
        where = (items.c.job_id == job_id, jobs.c.organization_id == organization_id, chosen)
        joined = items.join(jobs, jobs.c.id == items.c.job_id)
        columns = (items.c.id, items.c.position, items.c.key, items.c.text, items.c.status)
        rows = self.session.execute(
            select(*columns, items.c.stale)
            .select_from(joined)
            .where(*where)
            .order_by(items.c.position)
            .limit(limit)
        ).all()
        total = self.session.execute(
            select(func.count()).select_from(joined).where(*where)
        ).scalar_one()
        lines = [dict(r._mapping, stale=bool(r.stale)) for r in rows]
        return lines, int(total)
