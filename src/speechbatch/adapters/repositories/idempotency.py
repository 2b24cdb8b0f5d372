"""SQL about ``idempotency_keys``: claiming a key, tying it to what it created, recording
its answer, and sweeping the expired ones. All lease arithmetic on the database's clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

from sqlalchemy import Table, and_, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models_keys import IdempotencyKey

keys = cast(Table, IdempotencyKey.__table__)


@dataclass(frozen=True)
class KeyClaim:
    """A request's hold on a key: the row and the claim number that fences its writes."""

    key_id: int
    claim: int


@dataclass(frozen=True)
class KeyRecord:
    """A live key as another request with it finds it."""

    key_id: int
    fingerprint: str
    resource: str | None
    status_code: int | None
    body: str | None
    # Whether the request that holds it may still be working (its lease has not run out).
    leased: bool


class IdempotencyKeys(Protocol):
    """What the services need of the organizations' idempotency keys."""

    def claim_key(
        self,
        organization_id: int,
        key: str,
        fingerprint: str,
        *,
        ttl_seconds: float,
        lease_seconds: float,
    ) -> KeyClaim | None: ...
    def find_key(self, organization_id: int, key: str) -> KeyRecord | None: ...
    def bind_resource(self, held: KeyClaim, resource: str) -> bool: ...
    def record_answer(self, key_id: int, status_code: int, body: str) -> bool: ...
    def release_key(self, held: KeyClaim) -> bool: ...
    def sweep_expired(self, limit: int) -> None: ...


class IdempotencyRepository:
    """Runs inside the caller's unit of work; never commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def claim_key(
        self,
        organization_id: int,
        key: str,
        fingerprint: str,
        *,
        ttl_seconds: float,
        lease_seconds: float,
    ) -> KeyClaim | None:
        """Hold ``key`` for this request (compare-and-set); None when another request has it.

        One upsert: a new key is held at once; an expired key (older than ``ttl_seconds``)
        starts again as new; a key whose holder created nothing and whose lease has run
        out (its process died) is taken over by a request with the same fingerprint, with
        the next claim number, so the old holder's later writes are refused.
        """
        dialect = postgresql if self.session.get_bind().dialect.name == "postgresql" else sqlite
        insert = dialect.insert(keys)
        expired = keys.c.expires_at <= db_now()
        abandoned = and_(
            keys.c.resource.is_(None),
            keys.c.status_code.is_(None),
            keys.c.locked_until <= db_now(),
            keys.c.fingerprint == insert.excluded.fingerprint,
        )
        statement = (
            insert.values(
                organization_id=organization_id,
                key=key,
                fingerprint=fingerprint,
                claim=1,
                locked_until=later(lease_seconds),
                expires_at=later(ttl_seconds),
            )
            .on_conflict_do_update(
                index_elements=[keys.c.organization_id, keys.c.key],
                set_={
                    "fingerprint": insert.excluded.fingerprint,
                    "claim": keys.c.claim + 1,
                    "locked_until": insert.excluded.locked_until,
                    "expires_at": insert.excluded.expires_at,
                    "created_at": db_now(),
                    "resource": None,
                    "status_code": None,
                    "body": None,
                },
                where=or_(expired, abandoned),
            )
            .returning(keys.c.id, keys.c.claim)
        )
        row = self.session.execute(statement).first()
        return None if row is None else KeyClaim(int(row[0]), int(row[1]))

    def find_key(self, organization_id: int, key: str) -> KeyRecord | None:
        """The organization's live (unexpired) ``key``, None when there is none."""
        row = self.session.execute(
            select(
                keys.c.id,
                keys.c.fingerprint,
                keys.c.resource,
                keys.c.status_code,
                keys.c.body,
                keys.c.locked_until > db_now(),
            ).where(
                keys.c.organization_id == organization_id,
                keys.c.key == key,
                keys.c.expires_at > db_now(),
            )
        ).first()
        if row is None:
            return None
        return KeyRecord(int(row[0]), row[1], row[2], row[3], row[4], bool(row[5]))

    def bind_resource(self, held: KeyClaim, resource: str) -> bool:
        """In the transaction that creates ``resource``: tie the key to it, only while
        this request still holds the key (compare-and-set on the claim); whether it won."""
        row = self.session.execute(
            update(keys)
            .where(
                keys.c.id == held.key_id,
                keys.c.claim == held.claim,
                keys.c.resource.is_(None),
            )
            .values(resource=resource)
            .returning(keys.c.id)
        ).first()
        return row is not None

    def record_answer(self, key_id: int, status_code: int, body: str) -> bool:
        """Keep the first answer of the key (a later one changes nothing); whether this
        one was kept."""
        row = self.session.execute(
            update(keys)
            .where(keys.c.id == key_id, keys.c.status_code.is_(None))
            .values(status_code=status_code, body=body)
            .returning(keys.c.id)
        ).first()
        return row is not None

    def release_key(self, held: KeyClaim) -> bool:
        """Give the key up after a request that created nothing (it failed): a repeat
        runs again. Only while this request holds it and nothing was created."""
        row = self.session.execute(
            delete(keys)
            .where(
                keys.c.id == held.key_id,
                keys.c.claim == held.claim,
                keys.c.resource.is_(None),
                keys.c.status_code.is_(None),
            )
            .returning(keys.c.id)
        ).first()
        return row is not None

    def sweep_expired(self, limit: int) -> None:
        """Delete at most ``limit`` expired keys of any organization (each claim sweeps a
        few, so no sweeper thread is needed and the table holds about a day of keys).
        Rows another transaction holds are left for a later sweep."""
        doomed = (
            select(keys.c.id)
            .where(keys.c.expires_at <= db_now())
            .order_by(keys.c.expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        self.session.execute(delete(keys).where(keys.c.id.in_(doomed.scalar_subquery())))
