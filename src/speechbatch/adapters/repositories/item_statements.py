"""The statements of an item's fenced moves (see ``items.py``), the hot ones built once.

A start and a finish run while the job's row is locked by their fence: every lane of the
job waits for them. Their statements are built once with the run's numbers as bound
parameters (``b_job_id``, ``b_attempt``, ``b_item_id``, named apart from the columns an
UPDATE sets), so no Python builds them while the row is held.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Update,
    and_,
    bindparam,
    case,
    false,
    literal,
    null,
    or_,
    select,
    update,
)

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus, JobStatus
from speechbatch.adapters.repositories.channels import share_notice
from speechbatch.adapters.repositories.lexicon import lexicon_version_of
from speechbatch.adapters.repositories.tables import COUNTERS, items, jobs
from speechbatch.adapters.repositories.takes import take_number

# Items a run may start: a retry resumes ERROR items without resetting them at the claim.
STARTABLE = (ItemStatus.PENDING, ItemStatus.ERROR)
GENERATING_ONLY = (ItemStatus.GENERATING,)
SRC = items.alias("src")
# The hot moves' statements are built once (below) with these as bound parameters.
JOB_ID = bindparam("b_job_id", type_=Integer)
ATTEMPT = bindparam("b_attempt", type_=Integer)
ITEM_ID = bindparam("b_item_id", type_=Integer)


def counter_deltas(
    old_status: ColumnElement[str], from_statuses: Sequence[str], to_status: str
) -> dict[str, ColumnElement[int]]:
    """Per counter: what it gains when one item moves from ``old_status`` (if it is one of
    ``from_statuses``) to ``to_status`` (negative for the status it leaves); nothing
    changes when it is not."""
    deltas: dict[str, ColumnElement[int]] = {}
    for status, column in COUNTERS.items():
        if status == to_status:
            deltas[column.key] = case((one_of(old_status, from_statuses), 1), else_=0)
        elif status in from_statuses:
            deltas[column.key] = case((old_status == status, -1), else_=0)
    return deltas


def _done_update() -> Update:
    """A GENERATING item to DONE with its audio and measurement (bound as ``new_`` and
    the column's name: an UPDATE keeps the columns' own names for its SET)."""
    done = {name: bindparam(f"new_{name}", type_=items.c[name].type) for name in _DONE_VALUES}
    return (
        update(items)
        .where(
            *this_item(JOB_ID, ITEM_ID),
            or_(
                items.c.status == ItemStatus.GENERATING,
                # The same write again (a retry after a lost commit ack) wins again;
                # the counters did not move for it.
                and_(
                    items.c.status == ItemStatus.DONE,
                    items.c.audio_path == done["audio_path"],
                    items.c.audio_sha256 == done["audio_sha256"],
                ),
            ),
        )
        .values(
            status=ItemStatus.DONE,
            error_message=null(),
            reused=false(),
            stale=false(),
            current_take=take_number(ITEM_ID, done["audio_path"]),
            updated_at=db_now(),
            **done,
        )
        .returning(*done_columns(JOB_ID))
    )


def done_columns(job_id: int | ColumnElement[int]) -> tuple[Any, ...]:
    """What a DONE move answers. Its statement runs after the fence took the job row's
    lock, so the lexicon version it reads is at least the one a stale pass that has
    already marked this job's items used (see ``repositories/lexicon.py``)."""
    organization = select(jobs.c.organization_id).where(jobs.c.id == job_id).scalar_subquery()
    return (
        items.c.audio_path,
        items.c.current_take,
        items.c.text,
        lexicon_version_of(organization).label("lexicon_version"),
    )


def this_item(
    job_id: int | ColumnElement[int], item_id: int | ColumnElement[int]
) -> tuple[ColumnElement[bool], ...]:
    return (items.c.id == item_id, items.c.job_id == job_id)


def old_status(job_id: ColumnElement[int], item_id: ColumnElement[int]) -> ColumnElement[str]:
    return select(items.c.status).where(*this_item(job_id, item_id)).scalar_subquery()


def one_of(status: ColumnElement[str], statuses: Sequence[str]) -> ColumnElement[bool]:
    """``status IN (...)`` with the statuses as plain parameters: an expanding IN would
    rewrite the statement's SQL at every execution."""
    return status.in_([literal(s) for s in statuses])


def fence_update(deltas: dict[str, ColumnElement[int]], *extra: Any) -> Update:
    """The fence: the job row at the run's attempt (``job_id``, ``attempt`` bound),
    stamped, its version bumped and its counters moved by ``deltas``; RETURNING its id
    and ``extra``."""
    values: dict[str, Any] = {key: jobs.c[key] + delta for key, delta in deltas.items()}
    return (
        update(jobs)
        .where(
            jobs.c.id == JOB_ID, jobs.c.status == JobStatus.GENERATING, jobs.c.attempt == ATTEMPT
        )
        .values(updated_at=db_now(), version=jobs.c.version + 1, **values)
        .returning(jobs.c.id, *extra)
    )


@functools.cache
def moving_fence(from_statuses: tuple[str, ...], to_status: str, dialect: str) -> Update:
    """The fence of one item's move (``item_id`` bound) from ``from_statuses`` to
    ``to_status``, built once: a start also answers whether the job has no item left to
    start (``drained``: its fair share of slots goes to the other jobs, told to every
    process at commit)."""
    deltas = counter_deltas(old_status(JOB_ID, ITEM_ID), from_statuses, to_status)
    if to_status != ItemStatus.GENERATING:
        return fence_update(deltas)
    drained = jobs.c.items_pending + jobs.c.items_error == 0
    return fence_update(deltas, drained.label("drained"), *share_notice(dialect, drained))


def _start_item() -> Update:
    """A startable item to GENERATING (``job_id``, ``item_id``); with a ``fingerprint``,
    the newest finished audio of it (one index probe) names its item in the answer."""
    reusable = (
        select(SRC.c.id)
        .where(
            SRC.c.fingerprint == bindparam("b_fingerprint", type_=items.c.fingerprint.type),
            SRC.c.status == ItemStatus.DONE,
            SRC.c.audio_path.is_not(None),
        )
        .order_by(SRC.c.updated_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    return (
        update(items)
        .where(*this_item(JOB_ID, ITEM_ID), one_of(items.c.status, STARTABLE))
        .values(status=ItemStatus.GENERATING, error_message=null(), updated_at=db_now())
        .returning(items.c.text, items.c.audio_path, reusable.label("reusable_id"))
    )


_DONE_VALUES = ("audio_path", "audio_bytes", "fingerprint", "audio_sha256", "duration_seconds",
                "suspect")  # fmt: skip
STAMP = fence_update({})
START_ITEM = _start_item()
DONE_MOVE = _done_update()
