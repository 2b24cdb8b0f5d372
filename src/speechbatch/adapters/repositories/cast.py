"""A job's cast: which voice each speaker's lines are spoken with, and the stale marks a
change of it leaves on exactly those lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import ColumnElement, delete, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus
from speechbatch.adapters.repositories.tables import cast_voices, items, jobs
from speechbatch.adapters.repositories.takes import takes


@dataclass(frozen=True)
class CastLine:
    """One speaker of a job: their voice in the cast (None: not in it, the narrator's
    voice speaks them) and how many of the job's lines are theirs."""

    speaker: str
    voice: str | None
    lines: int


class Casts(Protocol):
    """What the pages need of a job's cast."""

    def cast_lines(self, job_id: int, organization_id: int) -> list[CastLine] | None: ...


class CastReads:
    """Reads of a job's cast, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def cast_lines(self, job_id: int, organization_id: int) -> list[CastLine] | None:
        """Every speaker of the organization's job, in the cast or with lines, by name;
        None when there is no such job."""
        found = self.session.execute(
            select(jobs.c.id).where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
        ).first()
        if found is None:
            return None
        voices = {
            row.speaker: row.voice
            for row in self.session.execute(
                select(cast_voices.c.speaker, cast_voices.c.voice).where(
                    cast_voices.c.job_id == job_id
                )
            )
        }
        counts = {
            row.speaker: int(row.lines)
            for row in self.session.execute(
                select(items.c.speaker, func.count().label("lines"))
                .where(items.c.job_id == job_id, items.c.speaker.is_not(None))
                .group_by(items.c.speaker)
            )
        }
        names = sorted(set(voices) | set(counts))
        return [CastLine(name, voices.get(name), counts.get(name, 0)) for name in names]


class CastMoves:
    """A job's cast over one session; the writes run under the job row's lock that the
    caller took first (an edit's ``lock_job``, or the job's creation)."""

    session: Session

    def cast_of(self, job_id: int) -> dict[str, str]:
        """The job's cast: each speaker's voice."""
        rows = self.session.execute(
            select(cast_voices.c.speaker, cast_voices.c.voice)
            .where(cast_voices.c.job_id == job_id)
            .order_by(cast_voices.c.speaker)
        ).all()
        return {row.speaker: row.voice for row in rows}

    def change_cast(self, job_id: int, changes: Mapping[str, str | None]) -> None:
        """Give each speaker of ``changes`` its voice (None: out of the cast, their lines
        go to the narrator); speakers not named keep theirs."""
        names = list(changes)
        if not names:
            return
        self.session.execute(
            delete(cast_voices).where(
                cast_voices.c.job_id == job_id, cast_voices.c.speaker.in_(names)
            )
        )
        rows = [
            {"job_id": job_id, "speaker": speaker, "voice": voice}
            for speaker, voice in changes.items()
            if voice is not None
        ]
        if rows:
            self.session.execute(insert(cast_voices), rows)

    def mark_speakers_stale(self, job_id: int, speakers: Sequence[str | None]) -> int:
        """Mark the DONE lines of ``speakers`` (None: the narrator's lines, those without a
        speaker) stale: their audio answers another voice now. Answers how many."""
        named = [s for s in speakers if s is not None]
        who: ColumnElement[bool] = items.c.speaker.in_(named)
        if None in speakers:
            who = or_(who, items.c.speaker.is_(None))
        marked = self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.DONE, who, ~items.c.stale)
            .values(stale=True, updated_at=db_now())
            .returning(items.c.id)
        ).all()
        return len(marked)

    def mark_other_requests_stale(self, job_id: int, voice: str, options: str) -> None:
        """Mark stale every item with audio whose current take was not made with the
        voice it would be sent with now (its speaker's, else ``voice``, the job's new
        one) and the job's ``options`` (stored JSON): the stale pass's own rule."""
        speaker_voice = (
            select(cast_voices.c.voice)
            .where(cast_voices.c.job_id == job_id, cast_voices.c.speaker == items.c.speaker)
            .correlate_except(cast_voices)  # the item is the UPDATE's, two levels up
            .scalar_subquery()
        )
        same_request = exists().where(
            takes.c.item_id == items.c.id,
            takes.c.take == items.c.current_take,
            takes.c.voice == func.coalesce(speaker_voice, voice),
            takes.c.options == options,
        )
        self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.audio_path.is_not(None), ~same_request)
            .values(stale=True, updated_at=db_now())
        )
