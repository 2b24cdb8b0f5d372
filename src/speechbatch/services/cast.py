"""A job's cast as the job page shows it: every speaker, their voice and their lines."""

from __future__ import annotations

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.cast import CastLine
from speechbatch.adapters.uow import UowFactory
from speechbatch.errors import NotFound

__all__ = ["CastLine", "cast_lines"]


def cast_lines(uow_factory: UowFactory, user: UserRecord, job_id: int) -> list[CastLine]:
    """The user's job's speakers (in its cast, or with lines), by name; NotFound when the
    job is not theirs."""
    with uow_factory(read_only=True) as uow:
        lines = uow.cast.cast_lines(job_id, user.organization_id)
    if lines is None:
        raise NotFound("job not found")
    return lines
