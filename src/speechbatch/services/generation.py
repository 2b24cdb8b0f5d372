"""The claim: one compare-and-set flips a job to GENERATING, then its run starts."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any, Protocol

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.config import Settings
from speechbatch.domain.editing import Selection
from speechbatch.errors import (
    AlreadyGenerating,
    NotFound,
    NothingToGenerate,
    ValidationError,
)
from speechbatch.services.lexicon import compiled_lexicon
from speechbatch.services.polls import _job_document
from speechbatch.services.recovery import recover_stale
from speechbatch.services.spending import check_budget

log = logging.getLogger(__name__)


class RunStarter(Protocol):
    """What a claim needs of the runner: this process's worker id (None: the run is left
    to the worker tier), its provider (for the budget check), and starting a run."""

    provider: TTSProvider

    def worker_id(self) -> int | None: ...
    def start(self, job_id: int, attempt: int) -> None: ...


def start_generation(
    uow_factory: UowFactory,
    settings: Settings,
    runner: RunStarter,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool = False,
    selection: Selection | None = None,
) -> dict[str, Any]:
    """Claim a job (compare-and-set) and start its run in this process (or, when the
    runner has no worker id, leave it to the worker tier).

    Exactly one of any number of concurrent callers wins; the others get
    AlreadyGenerating (or NothingToGenerate when every item is DONE already). With a
    ``selection`` the run is a regenerate of only those items (NothingToGenerate when
    it picks none; ValidationError, nothing changed, when an id is not the job's).
    """
    worker_id = runner.worker_id()
    regenerate = regenerate or selection is not None
    claim = functools.partial(
        _claim, uow_factory, settings, runner, user, job_id, worker_id, regenerate, selection
    )
    claimed = claim(recovery_first=True)
    if claimed is None:
        # A dead run must not block the admin's retry: recover first (through writers of
        # its own), then claim.
        recover_stale(uow_factory, settings, organization_id=user.organization_id, job_id=job_id)
        claimed = claim(recovery_first=False)
        assert claimed is not None
    attempt, view, reason = claimed
    if attempt is None:
        metrics.CLAIMS.labels(result="refused").inc()
        log.info("claim refused job=%s reason=%s", job_id, reason)
        if reason == "not_found":
            raise NotFound("job not found")
        if reason == "already_generating":
            raise AlreadyGenerating()
        raise NothingToGenerate()
    metrics.CLAIMS.labels(result="won").inc()
    log.info("claim won job=%s attempt=%s regenerate=%s", job_id, attempt, regenerate)
    runner.start(job_id, attempt)
    assert view is not None
    return view


def _claim(
    uow_factory: UowFactory,
    settings: Settings,
    runner: RunStarter,
    user: UserRecord,
    job_id: int,
    worker_id: int | None,
    regenerate: bool,
    selection: Selection | None,
    *,
    recovery_first: bool,
) -> tuple[int | None, dict[str, Any] | None, str] | None:
    """One transaction: the job's head, the budget's hint and the claim, with the answer
    when it wins: (attempt, view, "") or (None, None, why it was refused).

    None (nothing written) when ``recovery_first`` and the job looks dead: its head
    (one indexed statement, as a poll reads it) is what tells, so the common click pays
    for no recovery pass.
    """
    with uow_factory() as uow:
        head = uow.views.job_head(
            job_id,
            user.organization_id,
            lease_seconds=settings.lease_seconds,
            worker_dead_seconds=settings.worker_dead_seconds,
        )
        if recovery_first and head is not None and head.needs_recovery:
            return None
        lexicon = compiled_lexicon(uow.lexicon, user.organization_id, runner.provider.max_chars)
        check_budget(
            uow.spending, runner.provider, user, job_id, regenerate=regenerate, lexicon=lexicon
        )
        if selection is None:
            attempt = uow.jobs.claim_job(
                job_id,
                user.organization_id,
                regenerate=regenerate,
                user_id=user.id,
                worker_id=worker_id,
            )
        else:
            attempt = _claim_selection(uow, user, job_id, worker_id, selection)
        if attempt is None:
            return None, None, uow.jobs.claim_refusal(job_id, user.organization_id)
        if worker_id is None:
            # Claimed for the worker tier: the workers wake when this commits.
            uow.workers.wake_workers()
        # The answer shows the claim as it commits (GENERATING at the new attempt),
        # however fast the run then goes.
        view = _claimed_view(uow, settings, user, job_id)
        uow.commit()
        return attempt, view, ""


def _claim_selection(
    uow: WriteUnit, user: UserRecord, job_id: int, worker_id: int | None, selection: Selection
) -> int | None:
    """The claim of a selective regenerate (see ``EditsRepository.claim_selection``);
    raises, rolling it back, when it picks nothing or an id is not the job's."""
    claimed = uow.edits.claim_selection(
        job_id, user.organization_id, selection.items, user_id=user.id, worker_id=worker_id
    )
    if claimed is None:
        return None
    attempt, picked = claimed
    if selection.items is not None and picked != len(set(selection.items)):
        raise ValidationError("items names an item that is not one of this job's", field="items")
    if picked == 0:
        raise NothingToGenerate("no item is stale: nothing to regenerate")
    return attempt


def _claimed_view(
    uow: WriteUnit, settings: Settings, user: UserRecord, job_id: int
) -> dict[str, Any]:
    """The job as the claim's own transaction sees it."""
    head = uow.views.job_head(job_id, user.organization_id)
    assert head is not None
    result: dict[str, Any] = json.loads(_job_document(uow.views, head, settings, with_items=True))
    return result
