"""The pronunciation lexicon: read, replace, preview, and the stale predicate.

A PUT only replaces the rules and increments the version; the stale marks are written
by the background pass that follows (``runner/stale_pass.py``), judged by ``stale_now``.
What a change would make stale is counted in the background too
(``services/lexicon_impact.py``, ``runner/impact_pass.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from speechbatch import errors
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.lexicon import DoneItem, Lexicons, LexiconStamp, SpokenRow
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.lexicon import (
    Lexicon,
    LexiconError,
    Rule,
    TooManyReplacements,
    Unspeakable,
    UnsupportedRegex,
    parse_rules,
)
from speechbatch.domain.limits import MAX_PREVIEW

log = logging.getLogger(__name__)

_cache: dict[tuple[int, LexiconStamp, int], Lexicon] = {}
_cache_lock = threading.Lock()
# Compiled lexicons kept per process: each may hold up to LEXICON_MEMORY of DFA states.
_CACHE_SIZE = 16


def compiled_lexicon(repo: Lexicons, organization_id: int, limit: int) -> Lexicon:
    """The organization's rules now, for items of at most ``limit`` characters,
    compiled once per (organization, version) in this process: one small read when
    they are cached. Rules saved before the engine refused them give a broken lexicon
    (every line unspeakable with a message that says why), never a rule left out."""
    now = repo.stamp(organization_id)
    with _cache_lock:
        found = _cache.get((organization_id, now, limit))
    if found is not None:
        return found
    stamp, rules = repo.rules(organization_id)
    lexicon = Lexicon.stored(rules, stamp.version, limit=limit)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[(organization_id, stamp, limit)] = lexicon
    return lexicon


def rules_of(body: Any) -> list[Rule]:
    """The rules of a request's body, checked (422 ``invalid_rule`` or
    ``unsupported_regex`` naming the first that cannot be used)."""
    if not isinstance(body, dict) or "rules" not in body:
        raise errors.ValidationError('give the rules: {"rules": [...]}', field="rules")
    try:
        return parse_rules(body["rules"])
    except UnsupportedRegex as exc:
        raise errors.UnsupportedRegex(str(exc), field="rules") from None
    except LexiconError as exc:
        raise errors.InvalidRule(str(exc), field="rules") from None


def _answer(uow: Any, organization_id: int) -> dict[str, Any]:
    stamp, rules = uow.lexicon.rules(organization_id)
    state = uow.lexicon.state(organization_id)
    return {
        "rules": [r.as_json() for r in rules],
        "version": stamp.version,
        "stale_pass": "running" if state.due else "done",
    }


def get_lexicon(uow_factory: UowFactory, user: UserRecord) -> dict[str, Any]:
    """The organization's rules, version, and whether the stale marks are still being
    written (``stale_pass``: ``running`` or ``done``)."""
    with uow_factory(read_only=True) as uow:
        return _answer(uow, user.organization_id)


def put_lexicon(uow_factory: UowFactory, user: UserRecord, body: Any) -> dict[str, Any]:
    """Replace the organization's rules (checked first: an invalid one changes nothing)
    and increment the version; the stale pass for it is then due."""
    rules = rules_of(body)
    with uow_factory() as uow:
        uow.lexicon.replace_rules(user.organization_id, rules)
        answer = _answer(uow, user.organization_id)
        uow.commit()
    log.info(
        "lexicon replaced org=%s version=%s rules=%s by=%s",
        user.organization_id, answer["version"], len(rules), user.email,
    )  # fmt: skip
    return answer


def spoken_now(row: Any, lexicon: Lexicon, deadline: float) -> str | None:
    """An item row's spoken text with the rules now: the one the stale pass stored when
    it answers this version (no rule work in a request), else computed here while
    ``time.monotonic()`` is before ``deadline``; None: not known yet (the pass has it to
    do). Raises Unspeakable as ``Lexicon.spoken`` does."""
    if row.spoken_version == lexicon.version:
        if row.spoken_error is not None:
            raise Unspeakable(row.spoken_error)
        return row.text if row.spoken_text is None else str(row.spoken_text)
    if time.monotonic() >= deadline:
        return None
    return lexicon.spoken(row.text)


def unspeakable_error(exc: Unspeakable, field: str) -> errors.ValidationError:
    """The 422 of a text the rules cannot make a spoken text of: its code says why."""
    if isinstance(exc, TooManyReplacements):
        return errors.TooManyReplacements(str(exc), field=field)
    return errors.SpokenTextTooLong(str(exc), field=field)


def preview(uow_factory: UowFactory, user: UserRecord, body: Any, limit: int) -> dict[str, Any]:
    """A text as it would be spoken with the organization's rules now, for items of at
    most ``limit`` characters (422 ``spoken_text_too_long`` beyond)."""
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or len(text) > MAX_PREVIEW:
        raise errors.ValidationError(
            f"text must be a text of at most {MAX_PREVIEW:,} characters", "text"
        )
    with uow_factory(read_only=True) as uow:
        lexicon = compiled_lexicon(uow.lexicon, user.organization_id, limit)
    try:
        return {"spoken_text": lexicon.spoken(text)}
    except Unspeakable as exc:
        raise unspeakable_error(exc, "text") from None


def stale_now(item: DoneItem, lexicon: Lexicon) -> bool:
    """The stale predicate, the one the stale pass and a restore both ask: the take
    answered another text, voice or options than the job has now, or another spoken
    text than the rules give now (a line they cannot speak any more is stale: a run
    would end it ERROR). An item without a take to compare keeps its mark."""
    return _stale(item, _spoken_or_none(item.text, lexicon))


def judged(item: DoneItem, lexicon: Lexicon) -> SpokenRow:
    """What the stale pass writes of an item: its spoken text with the rules now (or
    why there is none) and its stale mark by ``stale_now``'s predicate."""
    try:
        spoken: str | None = lexicon.spoken(item.text)
        error = None
    except Unspeakable as exc:
        spoken, error = None, str(exc)
    stored = None if spoken == item.text else spoken
    return SpokenRow(item.id, stored, error, _stale(item, spoken), item.stale)


def _spoken_or_none(text: str, lexicon: Lexicon) -> str | None:
    try:
        return lexicon.spoken(text)
    except Unspeakable:
        return None


def _stale(item: DoneItem, spoken: str | None) -> bool:
    if item.take_spoken_text is None:
        return item.stale
    return item.other_reason or item.take_spoken_text != spoken
