"""finish: end an item's attempt in ONE short fenced transaction.

SENT: the audio is measured (outside any transaction), written (temp file, fsync,
rename; the key carries the attempt) and timed (``measure.time_take``, outside any
transaction too), then DONE with its key, measurement and timing, recorded as the
item's next take (takes beyond TAKES_KEPT dropped). FAILED: ERROR with the
message. NOT_SENT and OVER_BUDGET: PENDING again for the next run. Then the audio that
nothing refers to any more (the replaced audio, a dropped take's) is deleted.

Nothing is deleted on a guess. When the DONE move loses (the run was cancelled or
recovered, perhaps after a commit whose acknowledgement was lost and which did make this
audio the item's), its file goes only when a later read shows that nothing refers to it;
when that read cannot be made, ``gc`` deletes it later if nothing does.
"""

from __future__ import annotations

import hashlib
import logging

from speechbatch.adapters import metrics
from speechbatch.adapters.repositories.items import FinishedItem
from speechbatch.adapters.uow import RunUnit
from speechbatch.errors import DatabaseUnavailable
from speechbatch.runner.attempt import Attempt, Outcome, Run, audio_key
from speechbatch.runner.lexicon import checked
from speechbatch.runner.measure import Measured, measure_audio, time_take
from speechbatch.runner.steps import Steps

log = logging.getLogger(__name__)


def finish(steps: Steps, attempt: Attempt) -> Attempt:
    """Write the attempt's end (see the module); FENCED when the run lost its fence."""
    run = attempt.run
    match attempt.outcome:
        case Outcome.SENT | Outcome.FAILED:
            return _done_or_error(steps, attempt)
        case Outcome.NOT_SENT | Outcome.OVER_BUDGET:
            if attempt.outcome is Outcome.OVER_BUDGET:
                stop_over_budget(steps, run, attempt)
            else:
                run.left_items = True
            if attempt.started and not steps.fenced_tx(run, lambda uow: uow.runs.return_item(
                run.job_id, run.attempt, attempt.item_id), bool):  # fmt: skip
                return _fenced(attempt)
            return attempt
        case Outcome.REUSED:
            delete_orphans(steps, attempt.orphans)
            reused(run, attempt.item_id, attempt.reused_from)
            return attempt
        case Outcome.FENCED:
            return _fenced(attempt)
    return attempt


def _done_or_error(steps: Steps, attempt: Attempt) -> Attempt:
    run, audio, error = attempt.run, attempt.audio, attempt.error
    key, measured, timing = None, Measured(), None
    if audio is not None:
        measured = measure_audio(audio, attempt.text, run.options)
        extension = steps.provider_for(attempt).file_extension
        key = audio_key(run.job_id, attempt.item_id, run.attempt, extension)
        try:
            steps.storage.write(key, audio)
        except OSError as exc:
            key, error = None, f"could not store audio: {exc.strerror}"
        else:
            timing = time_take(audio, attempt.text, attempt.voice or run.voice, attempt.timing)

    def work(uow: RunUnit) -> FinishedItem:
        if key is None or audio is None:
            return uow.runs.finish_item(
                run.job_id, run.attempt, attempt.item_id, error_message=error or "failed"
            )
        done = uow.runs.finish_item(
            run.job_id, run.attempt, attempt.item_id,
            audio_path=key, audio_bytes=len(audio),
            audio_sha256=hashlib.sha256(audio).hexdigest(), fingerprint=attempt.fingerprint,
            replaced_audio_path=attempt.previous_audio,
            duration_seconds=measured.duration_seconds, suspect=measured.suspect,
            spoken_text=attempt.text, keep=steps.settings.takes_kept, timing=timing,
        )  # fmt: skip
        return checked(uow, run, attempt.item_id, attempt.text, done)

    finished = steps.fenced_tx(run, work, bool)
    if not finished:
        if key is not None:
            delete_unreferenced(steps, (key,))
        return _fenced(attempt)
    delete_orphans(steps, finished.orphaned_audio_paths)
    if key is None:
        return attempt.to(Outcome.FAILED, error=error)
    return attempt


def reuse_duplicate(
    steps: Steps, run: Run, item_id: int, source: int, fingerprint: str, spoken: str
) -> Outcome:
    """A duplicate of an item this run has just finished shares its audio (no call):
    REUSED, SKIPPED (not startable) or FENCED."""
    keep = steps.settings.takes_kept
    reuse = (run.job_id, run.attempt, item_id, source, fingerprint)
    finished = steps.fenced_tx(run, lambda uow: checked(uow, run, item_id, spoken,
        uow.runs.reuse_audio(*reuse, spoken_text=spoken, keep=keep)), bool)  # fmt: skip
    if not finished:
        return Outcome.SKIPPED if steps.fence(run) else Outcome.FENCED
    delete_orphans(steps, finished.orphaned_audio_paths)
    reused(run, item_id, source)
    return Outcome.REUSED


def delete_orphans(steps: Steps, keys: tuple[str, ...]) -> None:
    """Delete audio that a won transaction found nothing refers to any more (what an
    item's finish replaced, a take that fell off); a failure is logged (gc deletes it)."""
    for key in keys:
        try:
            steps.storage.delete(key)
        except OSError as exc:
            log.warning("could not delete unreferenced audio %s: %s", key, exc)


def delete_unreferenced(steps: Steps, keys: tuple[str, ...]) -> None:
    """Delete those of ``keys`` that a read now shows nothing refers to. A write whose
    outcome is unknown may have made one current: without the read, nothing goes."""
    try:
        referenced = steps.tx(lambda uow: uow.spending.referenced_keys(keys))
    except DatabaseUnavailable:
        log.warning("audio kept for gc (its references could not be read): %s", keys)
        return
    delete_orphans(steps, tuple(key for key in keys if key not in referenced))


def reused(run: Run, item_id: int, source_item_id: int | None) -> None:
    """Count and log an item that shares another item's audio."""
    metrics.REUSED_ITEMS.inc()
    log.info(
        "audio reused job=%s attempt=%s item=%s from item=%s",
        run.job_id, run.attempt, item_id, source_item_id,
    )  # fmt: skip


def stop_over_budget(steps: Steps, run: Run, attempt: Attempt) -> None:
    """Stop starting items: the organization's budget cannot pay for this call."""
    characters = len(attempt.text)
    try:
        usage = steps.tx(lambda uow: uow.spending.usage(run.organization_id))
        spent = (
            f"{usage.billed_characters:,} of {usage.budget_characters or 0:,} characters "
            f"billed in {usage.month}, {usage.remaining_characters or 0:,} left"
        )
    except DatabaseUnavailable:
        spent = "the usage could not be read"
    run.over_budget = (
        f"over budget: {spent}; the next item needs {characters:,}. "
        "Unsent items stay pending: raise the budget and Retry."
    )
    metrics.BUDGET_REFUSALS.labels(where="run").inc()
    log.warning(
        "budget refused a call job=%s attempt=%s item=%s characters=%s: %s",
        run.job_id, run.attempt, attempt.item_id, characters, run.over_budget,
    )  # fmt: skip


def _fenced(attempt: Attempt) -> Attempt:
    attempt.run.fenced.set()
    return attempt.to(Outcome.FENCED)
