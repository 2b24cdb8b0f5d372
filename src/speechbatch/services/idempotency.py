"""``Idempotency-Key`` on the creating calls: a request repeated with the same key by the
same organization within 24 hours answers what the first answered and creates nothing.

Three moves, each a compare-and-set on the key's row, none held across the work:
1. **Claim** the key (one upsert, in a short transaction that also sweeps a few expired
   keys). The winner runs the call; a concurrent repeat finds the key held and waits.
2. **Bind**: the call's own creating transaction ties the key to what it creates
   (``bind_key``), fenced by the claim. So a key never creates twice: a repeat after the
   first's process died either finds what it created (and answers it) or finds nothing
   created, takes the key over once the lease has run out, and runs the call itself; the
   old holder, if it was only slow, loses its bind and its creation rolls back.
3. **Record** the answer (status and JSON), which every later repeat gets as it was.
A call that fails creates nothing and gives its key back, so a repeat runs it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from speechbatch.adapters.repositories.idempotency import KeyClaim, KeyRecord
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.errors import (
    BadRequest,
    DatabaseUnavailable,
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    IdempotencyKeyTaken,
)

log = logging.getLogger(__name__)

__all__ = ["Answer", "KeyClaim", "bind_key", "check_key", "once"]

KEY_TTL_SECONDS = 24 * 3600.0
# How long a request holds its key before a repeat may take it over (when it created
# nothing): well beyond any creating call (an import answers within 10 s).
LEASE_SECONDS = 60.0
# How long a concurrent repeat waits for the first's answer before a 409.
WAIT_SECONDS = 20.0
# Expired keys deleted by each claim: more than one claim makes, so the table stays at
# about a day of keys without a sweeper.
SWEEP_LIMIT = 100
MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class Answer:
    """What a creating call answered: its status and its JSON text."""

    status: int
    body: str
    replayed: bool = False


def check_key(raw: str) -> str:
    """The key of an ``Idempotency-Key`` header: 1 to 255 visible ASCII characters (and
    spaces), bare or as a quoted string (the IETF draft's form); 400 otherwise."""
    key = raw.strip()
    if len(key) > 2 and key[0] == key[-1] == '"':
        key = key[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in key):
        raise BadRequest(f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} visible ASCII characters")
    return key


def bind_key(uow: WriteUnit, held: KeyClaim | None, resource: str) -> None:
    """In the transaction that creates ``resource`` (``job:ID``, ...): tie the request's
    key to it. IdempotencyKeyTaken (the creation rolls back) when another request took
    the key over meanwhile; nothing to do for a request without a key."""
    if held is not None and not uow.idempotency.bind_resource(held, resource):
        raise IdempotencyKeyTaken()


def once(
    uow_factory: UowFactory,
    organization_id: int,
    key: str,
    fingerprint: str,
    *,
    create: Callable[[KeyClaim], Answer],
    replay: Callable[[str], Answer],
    wait_seconds: float = WAIT_SECONDS,
) -> Answer:
    """Run ``create`` at most once per organization and key: the first request runs it,
    a repeat with the same ``fingerprint`` answers its answer (``replay`` rebuilds it
    from the resource when the first died before recording it), another fingerprint is
    a 422. A repeat while the first still runs waits up to ``wait_seconds``, then 409."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.01
    while True:
        held = _claim(uow_factory, organization_id, key, fingerprint)
        if held is not None:
            answer = _create(uow_factory, held, create)
            if answer is not None:
                return answer
        else:
            found = _find(uow_factory, organization_id, key)
            if found is not None:
                answer = _answer_of(uow_factory, found, fingerprint, replay)
                if answer is not None:
                    return answer
        if time.monotonic() >= deadline:
            raise IdempotencyKeyInProgress()
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _claim(
    uow_factory: UowFactory, organization_id: int, key: str, fingerprint: str
) -> KeyClaim | None:
    with uow_factory() as uow:
        uow.idempotency.sweep_expired(SWEEP_LIMIT)
        held = uow.idempotency.claim_key(
            organization_id,
            key,
            fingerprint,
            ttl_seconds=KEY_TTL_SECONDS,
            lease_seconds=LEASE_SECONDS,
        )
        uow.commit()
    return held


def _find(uow_factory: UowFactory, organization_id: int, key: str) -> KeyRecord | None:
    with uow_factory(read_only=True) as uow:
        return uow.idempotency.find_key(organization_id, key)


def _create(
    uow_factory: UowFactory, held: KeyClaim, create: Callable[[KeyClaim], Answer]
) -> Answer | None:
    """Run the call as the key's holder; None when another request took the key over.
    Only a success is kept for the repeats: after a failure the key is free again."""
    try:
        answer = create(held)
    except IdempotencyKeyTaken:
        return None
    except BaseException:
        _release(uow_factory, held)
        raise
    if 200 <= answer.status < 300:
        _record(uow_factory, held.key_id, answer)
    else:
        _release(uow_factory, held)
    return answer


def _answer_of(
    uow_factory: UowFactory,
    found: KeyRecord,
    fingerprint: str,
    replay: Callable[[str], Answer],
) -> Answer | None:
    """A repeat's answer from the key as it stands; None while its holder still works."""
    if found.fingerprint != fingerprint:
        raise IdempotencyKeyReused()
    if found.status_code is not None:
        return Answer(found.status_code, found.body or "", replayed=True)
    if found.resource is not None and not found.leased:
        # Its holder created and then died before it recorded the answer.
        answer = replace(replay(found.resource), replayed=True)
        _record(uow_factory, found.key_id, answer)
        return answer
    return None


def _record(uow_factory: UowFactory, key_id: int, answer: Answer) -> None:
    # Unrecorded, the key still names what it created: a repeat rebuilds the answer.
    try:
        with uow_factory() as uow:
            uow.idempotency.record_answer(key_id, answer.status, answer.body)
            uow.commit()
    except DatabaseUnavailable:
        log.warning("idempotency key=%s: answer not recorded", key_id, exc_info=True)


def _release(uow_factory: UowFactory, held: KeyClaim) -> None:
    # Unreleased, the key is taken over by a repeat once its lease has run out.
    try:
        with uow_factory() as uow:
            uow.idempotency.release_key(held)
            uow.commit()
    except DatabaseUnavailable:
        log.warning("idempotency key=%s: not released", held.key_id, exc_info=True)
