"""The lexicon's dry runs: what saving rules would make stale, asked by a request and
counted by background work (``runner/impact_pass.py``), never in the request.

A POST checks the rules (422 as a PUT would) and stores a pending request; its state is
then read by id until it is ``done``. A save finds the finished count of the same rules
asked under the same lexicon version, so its message needs no scan either.
"""

from __future__ import annotations

import json
from typing import Any

from speechbatch import errors
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.impacts import DONE, ImpactState
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.lexicon import Lexicon, LexiconError, Rule, parse_rules
from speechbatch.services.lexicon import rules_of


def canonical(rules: list[Rule]) -> str:
    """Rules as stored with a request: one JSON text for the same rules, so that a save
    finds the check of exactly what it saves by equality."""
    return json.dumps([r.as_json() for r in rules], separators=(",", ":"), sort_keys=True)


def request_impact(
    uow_factory: UowFactory, user: UserRecord, body: Any, limit: int
) -> dict[str, Any]:
    """Store a dry run of the body's rules (checked first, 422 as a PUT: the background
    pass never meets rules that cannot be used) for items of at most ``limit``
    characters; ``{"id", "status"}`` of the pending request."""
    rules = rules_of(body)
    try:
        Lexicon.compile(rules, limit=limit)
    except LexiconError as exc:
        raise errors.InvalidRule(str(exc), field="rules") from None
    org = user.organization_id
    with uow_factory() as uow:
        version = uow.lexicon.stamp(org).version
        impact_id = uow.impacts.create_impact(org, canonical(rules), version)
        uow.commit()
    return {"id": impact_id, "status": "pending"}


def impact_state(uow_factory: UowFactory, user: UserRecord, impact_id: int) -> dict[str, Any]:
    """A dry run of the organization (404 for another's or an unknown id):
    ``{"id", "status", "lines", "jobs", "checked", "total", "complete"}``, the DONE lines
    not stale now that the rules would make stale, in how many jobs, among the
    ``checked`` lines read so far of ``total`` (None until counted); ``complete`` once
    every line was read."""
    with uow_factory(read_only=True) as uow:
        state = uow.impacts.impact(user.organization_id, impact_id)
    if state is None:
        raise errors.NotFound("impact request not found")
    return answer(state)


def impact_check(
    uow_factory: UowFactory, user: UserRecord, impact_id: int
) -> tuple[dict[str, Any], list[Rule]]:
    """A dry run of the organization as ``impact_state`` answers it, and its rules (the
    check's page shows them again); 404 for another's or an unknown id."""
    with uow_factory(read_only=True) as uow:
        state = uow.impacts.impact(user.organization_id, impact_id)
    if state is None:
        raise errors.NotFound("impact request not found")
    return answer(state), parse_rules(json.loads(state.rules))


def answer(state: ImpactState) -> dict[str, Any]:
    """A stored dry run as the API shows it."""
    p = state.progress
    # Lines that became DONE during the count may be read beyond the total counted first.
    total = None if p.total is None else max(p.total, p.checked)
    return {
        "id": state.id,
        "status": state.status,
        "lines": p.lines,
        "jobs": p.jobs,
        "checked": p.checked,
        "total": total,
        "complete": state.status == DONE,
    }


def checked_impact(uow_factory: UowFactory, user: UserRecord, body: Any) -> dict[str, Any] | None:
    """The finished count of exactly these rules asked under the lexicon version saved
    now (what saving them makes stale), None when there is none or they cannot be
    used. Read before the save: the save increments the version."""
    try:
        rules = rules_of(body)
    except errors.ValidationError:
        return None
    org = user.organization_id
    with uow_factory(read_only=True) as uow:
        version = uow.lexicon.stamp(org).version
        state = uow.impacts.finished_impact(org, canonical(rules), version)
    return None if state is None else answer(state)
