"""The statements of the provider slots that depend on the deployment's limits (see
``slots.py``): what counts as a live slot, a job's fair share, and the take, built once
per deployment's limits with the run's numbers bound (it runs while the job's row is
locked by the start's fence).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Integer,
    Table,
    and_,
    bindparam,
    exists,
    func,
    literal,
    not_,
    or_,
    select,
    type_coerce,
)
from sqlalchemy.dialects import postgresql, sqlite

from speechbatch.adapters.db import ago, db_now
from speechbatch.adapters.models import JobStatus, ProviderSlot
from speechbatch.adapters.repositories.sql_functions import greatest
from speechbatch.adapters.repositories.tables import cast_voices, jobs, workers

provider_slots = cast(Table, ProviderSlot.__table__)


@dataclass(frozen=True)
class Limits:
    """What counts as a live slot, and the deployment's capacity: the slot numbers
    ``first`` .. ``first + capacity - 1`` (each provider of several has its own range)."""

    capacity: int
    worker_dead_seconds: float
    max_hold_seconds: float
    first: int = 0
    # Of several providers: the jobs that share these slots are those whose voice has
    # the prefix ``own`` ("google:"), or (the default's, ``own`` empty) none of ``others``.
    own: str = ""
    others: tuple[str, ...] = ()

    def sharing(self) -> list[ColumnElement[bool]]:
        """Which jobs speak through these slots (none said: every job's): those whose
        voice (the narrator's) or a voice of whose cast is this provider's. A cast
        voice counts whether or not its speaker has lines left: a job is counted in a
        share it may not need (a smaller share for the others) rather than left out of
        one it does."""
        if not self.own and not self.others:
            return []
        cast = exists().where(cast_voices.c.job_id == jobs.c.id, self._ours(cast_voices.c.voice))
        return [or_(self._ours(jobs.c.voice), cast)]

    def _ours(self, voice: ColumnElement[str]) -> ColumnElement[bool]:
        """Whether ``voice`` is spoken by this provider: its prefix, or (the default's)
        none of the others'."""
        if self.own:
            return voice.startswith(self.own, autoescape=True)
        return and_(*[~voice.startswith(o, autoescape=True) for o in self.others])

    def live(self, slot: Any) -> ColumnElement[bool]:
        """The slot row is held: not released, not held longer than a call can last (a
        release lost to a database outage), and its holder alive: its worker heartbeats,
        not stopped, or it took or renewed the slot within WORKER_DEAD_SECONDS.

        The grant's own time counts because right after a database outage longer than
        WORKER_DEAD_SECONDS every beat is stale, while a holder that renews its slot
        right before its send has just shown it is alive; it sits on the slot's row, which
        PostgreSQL re-checks on its newest version."""
        # INs over the workers, not an EXISTS correlated to the slot: inside ON
        # CONFLICT's WHERE, SQLAlchemy puts the slots table into such a subquery's FROM,
        # and an EXISTS over the whole table (empty in the statement's snapshot) called a
        # held slot free: two grants of one slot.
        running = select(workers.c.id).where(workers.c.stopped_at.is_(None))
        beating = running.where(workers.c.heartbeat_at >= ago(self.worker_dead_seconds))
        return and_(
            slot.c.released_at.is_(None),
            slot.c.acquired_at >= ago(self.max_hold_seconds),
            slot.c.worker_id.in_(running),
            or_(
                slot.c.acquired_at >= ago(self.worker_dead_seconds),
                slot.c.worker_id.in_(beating),
            ),
        )

    def held_by(self, job_id: int | ColumnElement[int]) -> ColumnElement[int]:
        """How many live slots the job holds."""
        held = provider_slots.alias("held")
        return (
            select(func.count())
            .select_from(held)
            .where(
                held.c.job_id == job_id,
                held.c.slot.between(self.first, self.first + self.capacity - 1),
                self.live(held),
            )
            .scalar_subquery()
        )

    def share(self) -> ColumnElement[int]:
        """A job's fair share: ceil(capacity / GENERATING jobs that still have items to
        start), integer arithmetic. A job whose last items are in flight wants no more
        slots, so the others may take what it gives back."""
        wanting = select(func.count()).where(
            jobs.c.status == JobStatus.GENERATING,
            jobs.c.items_pending + jobs.c.items_error > 0,
            *self.sharing(),
        )
        running = type_coerce(greatest(literal(1, Integer), wanting.scalar_subquery()), Integer)
        return (literal(self.capacity, Integer) + running - 1) // running


@functools.cache
def acquire_statement(dialect: str, limits: Limits) -> Any:
    """The slot's reclaim-or-insert for one deployment's limits, built once: the run's
    numbers are bound parameters (``worker_id``, ``job_id``, ``attempt``)."""
    candidate = _free_slot_for(limits)
    insert_fn = postgresql.insert if dialect == "postgresql" else sqlite.insert
    upsert = insert_fn(provider_slots).from_select(
        ["slot", "token", "worker_id", "job_id", "attempt", "acquired_at"], candidate
    )
    return upsert.on_conflict_do_update(
        index_elements=[provider_slots.c.slot],
        set_={
            "token": provider_slots.c.token + 1,
            "worker_id": upsert.excluded.worker_id,
            "job_id": upsert.excluded.job_id,
            "attempt": upsert.excluded.attempt,
            "acquired_at": upsert.excluded.acquired_at,
            "released_at": None,
        },
        # The reclaim: only a slot nobody holds any more.
        where=not_(limits.live(provider_slots)),
    ).returning(provider_slots.c.slot, provider_slots.c.token)


def _free_slot_for(limits: Limits) -> Any:
    """One free slot number (none held live) as the row a grant to this run would be, if
    the run is still GENERATING at ``attempt`` and under its fair share."""
    first = limits.first
    numbers = select(literal(first, Integer).label("n")).cte("numbers", recursive=True)
    numbers = numbers.union_all(
        select((numbers.c.n + 1).label("n")).where(numbers.c.n + 1 < first + limits.capacity)
    )
    job_id = bindparam("job_id", type_=Integer)
    attempt = bindparam("attempt", type_=Integer)
    held = provider_slots.alias("taken")
    # Free numbers only, in random order so that concurrent acquirers rarely pick the
    # same number (a collision costs the loser one retry).
    return (
        select(
            numbers.c.n,
            literal(1, Integer),
            bindparam("worker_id", type_=Integer),
            job_id,
            attempt,
            db_now(),
        )
        .where(
            numbers.c.n.not_in(select(held.c.slot).where(limits.live(held))),
            exists().where(
                jobs.c.id == job_id,
                jobs.c.attempt == attempt,
                jobs.c.status == JobStatus.GENERATING,
            ),
            limits.held_by(job_id) < limits.share(),
        )
        .order_by(func.random())
        .limit(1)
    )
