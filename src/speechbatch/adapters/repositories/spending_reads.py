"""The spending repository's reads: a job's items for an estimate, whether audio can be
reused, and which stored files something still refers to (the ledger's writes are in
``ledger.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import Table, and_, func, select
from sqlalchemy.orm import Session

from speechbatch.adapters.models import Export, ItemStatus, Render, Take
from speechbatch.adapters.repositories.tables import item_voice, items, jobs
from speechbatch.domain.book_source import job_of_source_key

exports = cast(Table, Export.__table__)
renders = cast(Table, Render.__table__)
takes = cast(Table, Take.__table__)

# Fingerprints per IN (...) list: well under every backend's bound-parameter limit.
_CHUNK = 500


_T = TypeVar("_T")


def _chunks(values: list[_T]) -> Iterable[list[_T]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


@dataclass(frozen=True)
class JobItems:
    """A job's voice and options (stored JSON) and its items' (id, status, text, stale,
    the spoken text the stale pass stored: spoken_version, spoken_text, spoken_error, and
    the voice it is spoken with: its speaker's, else the job's)."""

    voice: str
    options: str
    rows: list[Any]


class SpendingReads:
    """The read-only queries of spending over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def job_items(self, job_id: int, organization_id: int) -> JobItems | None:
        """A job's voice, options and its items' (id, status, text, stale, stored spoken
        text), in order; None when not the org's."""
        job = self.session.execute(
            select(jobs.c.voice, jobs.c.options).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        if job is None:
            return None
        rows = self.session.execute(
            select(
                items.c.id,
                items.c.status,
                items.c.text,
                items.c.stale,
                items.c.spoken_version,
                items.c.spoken_text,
                items.c.spoken_error,
                item_voice().label("voice"),
            )
            .join_from(items, jobs, jobs.c.id == items.c.job_id)
            .where(items.c.job_id == job_id)
            .order_by(items.c.position)
        ).all()
        return JobItems(job.voice, job.options, list(rows))

    def job_stamp(self, job_id: int, organization_id: int) -> tuple[int, Any] | None:
        """The job's version (every write of it or its items bumps it) and when it was
        made (no other database's job of that id has both); None when not the
        organization's."""
        row = self.session.execute(
            select(jobs.c.version, jobs.c.created_at).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        return None if row is None else (int(row.version), row.created_at)

    def longest_unsent(self, job_id: int, organization_id: int, *, regenerate: bool) -> int | None:
        """The characters of the job's longest text still to send (not DONE; every item
        for a regenerate), counted by the database: 0 when none is left, None when the
        job is not the organization's. No call of a click can need more."""
        unsent = items.c.job_id == jobs.c.id
        if not regenerate:
            unsent = and_(unsent, items.c.status != ItemStatus.DONE)
        longest = select(func.max(func.length(items.c.text))).where(unsent).scalar_subquery()
        row = self.session.execute(
            select(func.coalesce(longest, 0)).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        return None if row is None else int(row[0])

    def reusable_fingerprints(self, fingerprints: Iterable[str]) -> set[str]:
        """Which of these fingerprints already have finished audio (an index probe each)."""
        wanted = sorted(set(fingerprints))
        found: set[str] = set()
        for chunk in _chunks(wanted):
            found.update(
                self.session.execute(
                    select(items.c.fingerprint)
                    .where(
                        items.c.fingerprint.in_(chunk),
                        items.c.status == ItemStatus.DONE,
                        items.c.audio_path.is_not(None),
                    )
                    .distinct()
                ).scalars()
            )
        return found

    def referenced_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of these storage keys an item's audio, a kept take, an export's archive,
        a render's files or a job's cover refer to, or are a job's kept EPUB (its
        source key names it, ``domain.book_source``)."""
        wanted = sorted(set(keys))
        found: set[str] = set()
        for chunk in _chunks(wanted):
            found.update(
                self.session.execute(
                    select(items.c.audio_path).where(items.c.audio_path.in_(chunk)).distinct()
                ).scalars()
            )
            found.update(
                self.session.execute(
                    select(exports.c.file_path).where(exports.c.file_path.in_(chunk))
                ).scalars()
            )
            for column in (
                renders.c.file_path, renders.c.vtt_path, renders.c.srt_path, renders.c.zip_path,
                jobs.c.cover_path,
            ):  # fmt: skip
                found.update(
                    self.session.execute(select(column).where(column.in_(chunk))).scalars()
                )
            found.update(
                self.session.execute(
                    select(takes.c.audio_path).where(takes.c.audio_path.in_(chunk)).distinct()
                ).scalars()
            )
        return found | self._live_sources(wanted)

    def _live_sources(self, keys: list[str]) -> set[str]:
        """Which of these keys are the kept EPUB of a job that still exists."""
        named = {key: owner for key in keys if (owner := job_of_source_key(key)) is not None}
        live: set[tuple[int, int]] = set()
        for chunk in _chunks(sorted({job for _, job in named.values()})):
            rows = self.session.execute(
                select(jobs.c.organization_id, jobs.c.id).where(jobs.c.id.in_(chunk))
            )
            live.update((row.organization_id, row.id) for row in rows)
        return {key for key, owner in named.items() if owner in live}
