"""Editing a job that is not running: an item's text, its takes, the job's voice,
options and cast, and deleting the job. Each is one short transaction that locks the job row
first; none of them sends anything (only a run does).
"""

from __future__ import annotations

import logging
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.edits import LockedJob
from speechbatch.adapters.repositories.tables import audio_url, take_audio_url
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.domain.cast import changed_speakers
from speechbatch.domain.editing import (
    OptionsError,
    Selection,
    clean_options,
    options_json,
    parse_options,
)
from speechbatch.domain.statuses import JobStatus
from speechbatch.errors import AlreadyGenerating, NotFound, ValidationError
from speechbatch.services.books import set_author
from speechbatch.services.jobs import MAX_ITEMS, Limits, validate_cast, validate_text
from speechbatch.services.lexicon import compiled_lexicon, stale_now
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)


# Take numbers are 32-bit integers in the database: a larger one names no take.
MAX_TAKE = 2**31 - 1


def _kept_number(take: int) -> int:
    """``take`` when it can name a take at all; NotFound otherwise."""
    if not 0 < take <= MAX_TAKE:
        raise NotFound("no such take of this item")
    return take


def _locked(uow: WriteUnit, user: UserRecord, job_id: int) -> LockedJob:
    """The user's job, its row locked for an edit; NotFound, or AlreadyGenerating during
    a run (the caller's transaction then rolls back, changing nothing)."""
    job = uow.edits.lock_job(job_id, user.organization_id)
    if job is None:
        raise NotFound("job not found")
    if job.status == JobStatus.GENERATING:
        raise AlreadyGenerating("the job is generating: wait for its run to end, or cancel it")
    return job


def edit_item(
    uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int, text: Any, limits: Limits
) -> None:
    """Give an item a new text (validated as at creation): it becomes PENDING with its
    current audio kept and stale; a COMPLETED job becomes PENDING, so Generate sends
    exactly the edited items."""
    cleaned = validate_text(text, limits)
    with uow_factory() as uow:
        _locked(uow, user, job_id)
        if uow.edits.edit_item(job_id, item_id, cleaned) is None:
            raise NotFound("item not found")
        uow.edits.settle_job(job_id)
        uow.commit()
    log.info("item edited job=%s item=%s by=%s", job_id, item_id, user.email)


def item_takes(
    uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int, keep: int
) -> dict[str, Any]:
    """The item's kept takes, newest first: ``{"takes": [...]}``."""
    with uow_factory(read_only=True) as uow:
        if not uow.takes.has_item(job_id, item_id, user.organization_id):
            raise NotFound("item not found")
        rows = uow.takes.item_takes(item_id, keep)
    return {
        "takes": [
            {
                "take": r.take,
                "text": r.text,
                "spoken_text": r.spoken_text,
                "voice": r.voice,
                "audio_url": take_audio_url(job_id, item_id, r.take),
                "duration_seconds": r.duration_seconds,
                "reused": r.reused,
                "created_at": r.created_at.isoformat(),
                "current": r.current,
            }
            for r in rows
        ]
    }


def item_page(
    uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int, keep: int
) -> dict[str, Any]:
    """One item (its text, status, flags, audio) and its kept takes, for the item page."""
    with uow_factory(read_only=True) as uow:
        item = uow.takes.item_row(job_id, item_id, user.organization_id)
    if item is None:
        raise NotFound("item not found")
    item["stale"] = bool(item["stale"])
    item["audio_url"] = audio_url(job_id, item_id) if item.pop("has_audio") else None
    return {"item": item, **item_takes(uow_factory, user, job_id, item_id, keep)}


def selection_lines(
    uow_factory: UowFactory, user: UserRecord, job_id: int, selection: Selection, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` lines a selection names (position, key, text, status, stale),
    in position order, and how many it names in all: what the confirmation page lists."""
    with uow_factory(read_only=True) as uow:
        return uow.takes.selected_lines(job_id, user.organization_id, selection.items, limit)


def take_audio_key(
    uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int, take: int, keep: int
) -> str:
    """The storage key of one kept take's audio (NotFound when it is not kept)."""
    _kept_number(take)
    with uow_factory(read_only=True) as uow:
        if not uow.takes.has_item(job_id, item_id, user.organization_id):
            raise NotFound("item not found")
        key = uow.takes.take_audio(item_id, take, keep)
    if key is None:
        raise NotFound("no such take")
    return key


def restore_take(
    uow_factory: UowFactory,
    storage: Storage,
    user: UserRecord,
    job_id: int,
    item_id: int,
    take: int,
    keep: int,
    limit: int,
) -> None:
    """Make a kept take the item's audio again, without a provider call: the item's text
    becomes the take's and it is DONE, stale when the stale pass would mark it so (the
    take was made from another voice, options or spoken text than would be sent now, to
    items of at most ``limit`` characters)."""
    _kept_number(take)
    with uow_factory() as uow:
        job = _locked(uow, user, job_id)
        if uow.edits.kept_take(job_id, item_id, take, keep) is None:
            raise NotFound("no such take of this item")
        orphans = uow.edits.restore_take(job_id, item_id, take)
        # The pass's own question and predicate: the next pass never undoes this mark.
        restored = uow.lexicon.done_item(job_id, item_id)
        rules = compiled_lexicon(uow.lexicon, job.organization_id, limit)
        if restored is not None and stale_now(restored, rules):
            uow.lexicon.set_stale(job_id, [item_id], [])
        uow.edits.settle_job(job_id)
        uow.commit()
    for key in orphans:
        storage.delete(key)
    log.info("take restored job=%s item=%s take=%s by=%s", job_id, item_id, take, user.email)


def job_options(raw: Any) -> dict[str, Any]:
    """A job's options from a request, checked (ValidationError naming ``options``)."""
    try:
        return clean_options(raw)
    except OptionsError as exc:
        raise ValidationError(str(exc), field="options") from None


_JOB_CHANGES = ("voice", "options", "author", "cast")


def update_job(
    uow_factory: UowFactory, user: UserRecord, job_id: int, body: dict[str, Any], limits: Limits
) -> bool:
    """Change the job's voice and/or options for the items sent from then on (a change
    marks every item with audio stale), its cast (a speaker whose voice changes has
    exactly their DONE lines marked stale), and/or its author (which no audio depends
    on, so in any state). Answers whether the voice, options or cast changed."""
    if not set(_JOB_CHANGES) & set(body):
        raise ValidationError("give voice, options, cast or author to change", field="voice")
    unknown = sorted(set(body) - set(_JOB_CHANGES))
    if unknown:
        raise ValidationError(
            f"unknown field {unknown[0]!r}: voice, options, cast and author", field="voice"
        )
    voice = body.get("voice")
    if "voice" in body and (not isinstance(voice, str) or voice.strip() not in limits.voices):
        raise ValidationError(f"voice must be one of: {', '.join(limits.voices)}", field="voice")
    options = job_options(body["options"]) if "options" in body else None
    cast = validate_cast(body["cast"], limits, allow_removal=True) if "cast" in body else None
    if "author" in body:
        set_author(uow_factory, user, job_id, body["author"])
    if "voice" not in body and "options" not in body and cast is None:
        return False
    with uow_factory() as uow:
        job = _locked(uow, user, job_id)
        new_voice = voice.strip() if isinstance(voice, str) else job.voice
        new_options = options_json(options) if options is not None else job.options
        changed = (new_voice, parse_options(new_options)) != (
            job.voice,
            parse_options(job.options),
        )
        if changed:
            uow.edits.set_voice_and_options(job_id, new_voice, new_options)
        if cast:
            changed = _recast(uow, job_id, cast, new_voice) or changed
        uow.commit()
    log.info("job changed job=%s by=%s changed=%s", job_id, user.email, changed)
    return changed


def _recast(uow: WriteUnit, job_id: int, changes: dict[str, str | None], narrator: str) -> bool:
    """Apply a cast change; mark stale the DONE lines of each speaker whose voice it
    changes (and only theirs). Answers whether any speaker's voice changed."""
    before = uow.edits.cast_of(job_id)
    merged = {**before, **changes}
    after = {speaker: voice for speaker, voice in merged.items() if voice is not None}
    uow.edits.change_cast(job_id, changes)
    moved = changed_speakers(before, after, narrator)
    if moved:
        uow.edits.mark_speakers_stale(job_id, moved)
    return bool(moved) or before != after


def delete_job(uow_factory: UowFactory, storage: Storage, user: UserRecord, job_id: int) -> None:
    """Delete a job that is not running, with its items, runs and takes; audio nothing
    else refers to goes with it."""
    with uow_factory() as uow:
        _locked(uow, user, job_id)
        orphans = uow.edits.delete_job(job_id)
        uow.commit()
    for key in orphans:
        storage.delete(key)
    log.warning("job deleted job=%s by=%s files=%s", job_id, user.email, len(orphans))


# Item ids are 64-bit integers in the database: anything else names no item.
_MAX_ID = 2**63 - 1


def selection_of(items: Any, stale: Any) -> Selection | None:
    """A regenerate's selection from a request: ``items`` (a list of item ids) or
    ``stale`` (true); None (neither) is every item."""
    if not isinstance(stale, bool) and stale is not None:
        raise ValidationError("stale must be true or false", field="stale")
    if items is None:
        return Selection(None) if stale else None
    if stale:
        raise ValidationError("give items or stale, not both", field="items")
    if not isinstance(items, list) or not items or len(items) > MAX_ITEMS:
        raise ValidationError(f"items must be a list of 1 to {MAX_ITEMS} item ids", field="items")
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 < i <= _MAX_ID for i in items):
        raise ValidationError("items must be item ids (positive integers)", field="items")
    return Selection(tuple(items))


def selection_from_query(items: str | None, stale: bool) -> Selection | None:
    """An estimate's selection from ``?items=3,5,8`` or ``?stale=1``."""
    if items is None:
        return Selection(None) if stale else None
    try:
        ids = [int(part) for part in items.split(",") if part.strip()]
    except ValueError:
        raise ValidationError("items must be item ids separated by commas", field="items") from None
    return selection_of(ids, stale or None)
