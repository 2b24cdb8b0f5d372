"""Core table handles shared by the repositories and the read side."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Column, ColumnElement, Table, func, select

from speechbatch.adapters.models import (
    ApiToken,
    CastVoice,
    Chapter,
    Item,
    ItemStatus,
    Job,
    Organization,
    Run,
    SignInThrottle,
    User,
    Worker,
)
from speechbatch.adapters.models_outputs import RetiredId

jobs = cast(Table, Job.__table__)
items = cast(Table, Item.__table__)
runs = cast(Table, Run.__table__)
chapters = cast(Table, Chapter.__table__)
workers = cast(Table, Worker.__table__)
users = cast(Table, User.__table__)
organizations = cast(Table, Organization.__table__)
api_tokens = cast(Table, ApiToken.__table__)
sign_in_throttles = cast(Table, SignInThrottle.__table__)
retired_ids = cast(Table, RetiredId.__table__)
cast_voices = cast(Table, CastVoice.__table__)

# The job row's progress counter of each item status.
COUNTERS: dict[str, Column[int]] = {
    ItemStatus.PENDING: jobs.c.items_pending,
    ItemStatus.GENERATING: jobs.c.items_generating,
    ItemStatus.DONE: jobs.c.items_done,
    ItemStatus.ERROR: jobs.c.items_error,
}


def item_voice() -> ColumnElement[str]:
    """The voice an item (``items``, beside its job ``jobs``) is spoken with: its
    speaker's in the job's cast, else the job's own (the narrator's)."""
    speaker_voice = (
        select(cast_voices.c.voice)
        .where(cast_voices.c.job_id == items.c.job_id, cast_voices.c.speaker == items.c.speaker)
        # The item is the enclosing statement's, however deep this expression sits.
        .correlate_except(cast_voices)
        .scalar_subquery()
    )
    return func.coalesce(speaker_voice, jobs.c.voice)


def audio_url(job_id: int, item_id: int) -> str:
    """The root-relative API path of an item's audio."""
    return f"/api/jobs/{job_id}/items/{item_id}/audio"


def take_audio_url(job_id: int, item_id: int, take: int) -> str:
    """The root-relative API path of one kept take's audio."""
    return f"/api/jobs/{job_id}/items/{item_id}/takes/{take}/audio"
