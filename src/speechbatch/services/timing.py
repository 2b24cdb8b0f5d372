"""An item's timing: where each sentence (and word) of its current take is spoken."""

from __future__ import annotations

import json

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.timing import Span, estimated_timing, timing_from_json
from speechbatch.errors import NotFound
from speechbatch.shapes.jobs import ItemTiming, TimedSpan


def item_timing(uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int) -> ItemTiming:
    """The current take's timing (NotFound when the item is not the organization's job's,
    or has no take); a take never timed answers its sentences spread over its length."""
    with uow_factory(read_only=True) as uow:
        if not uow.takes.has_item(job_id, item_id, user.organization_id):
            raise NotFound("item not found")
        current = uow.takes.current_timing(item_id)
    if current is None:
        raise NotFound("the item has no take yet")
    stored = json.loads(current.timing) if current.timing else None
    timing = timing_from_json(stored) or estimated_timing(
        current.spoken_text, current.duration_seconds
    )
    words = None if timing.words is None else [_span(w) for w in timing.words]
    return {
        "level": "word" if words is not None else "sentence",
        "sentences": [_span(s) for s in timing.sentences],
        "words": words,
    }


def _span(span: Span) -> TimedSpan:
    return {"text": span.text, "start_seconds": span.start, "end_seconds": span.end}
