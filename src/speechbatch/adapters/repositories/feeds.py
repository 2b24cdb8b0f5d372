"""Podcast feeds: a job's secret feed URL (its hash stored), replaced, revoked, found."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

from sqlalchemy import Table, delete, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models_outputs import Feed
from speechbatch.adapters.repositories.tables import jobs

feeds = cast(Table, Feed.__table__)


@dataclass(frozen=True)
class FeedJob:
    """The job a feed's secret opens, as a feed shows it."""

    job_id: int
    organization_id: int
    title: str
    author: str | None
    cover_path: str | None
    created_at: datetime


class Feeds(Protocol):
    """What the services need of feeds."""

    def replace_feed(self, job_id: int, organization_id: int, token_hash: str) -> bool: ...
    def delete_feed(self, job_id: int, organization_id: int) -> bool: ...
    def feed_created_at(self, job_id: int, organization_id: int) -> datetime | None: ...
    def job_of_feed(self, token_hash: str) -> FeedJob | None: ...


class FeedRepository:
    """SQL about ``feeds``; runs inside the caller's unit of work, never commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def replace_feed(self, job_id: int, organization_id: int, token_hash: str) -> bool:
        """Make ``token_hash`` the job's feed secret, replacing the one it had (whose URL
        then answers 404), in one upsert; whether the job exists in that organization.
        The job's check rides in the statement, so a job of another organization never
        gains a feed."""
        dialect = postgresql if self.session.get_bind().dialect.name == "postgresql" else sqlite
        source = select(jobs.c.id, jobs.c.organization_id, literal(token_hash), db_now()).where(
            jobs.c.id == job_id, jobs.c.organization_id == organization_id
        )
        statement = (
            dialect.insert(feeds)
            .from_select(["job_id", "organization_id", "token_hash", "created_at"], source)
            .on_conflict_do_update(
                index_elements=[feeds.c.job_id],
                set_={"token_hash": token_hash, "created_at": db_now()},
            )
            .returning(feeds.c.id)
        )
        return self.session.execute(statement).first() is not None

    def delete_feed(self, job_id: int, organization_id: int) -> bool:
        """Revoke the job's feed; whether it had one."""
        gone = self.session.execute(
            delete(feeds)
            .where(feeds.c.job_id == job_id, feeds.c.organization_id == organization_id)
            .returning(feeds.c.id)
        ).first()
        return gone is not None

    def feed_created_at(self, job_id: int, organization_id: int) -> datetime | None:
        """When the job's live feed was made, or None without one."""
        return self.session.execute(
            select(feeds.c.created_at).where(
                feeds.c.job_id == job_id, feeds.c.organization_id == organization_id
            )
        ).scalar_one_or_none()

    def job_of_feed(self, token_hash: str) -> FeedJob | None:
        """The job whose live feed has this secret's hash, or None."""
        row = self.session.execute(
            select(
                jobs.c.id.label("job_id"),
                jobs.c.organization_id,
                jobs.c.title,
                jobs.c.author,
                jobs.c.cover_path,
                feeds.c.created_at,
            )
            .join(feeds, feeds.c.job_id == jobs.c.id)
            .where(feeds.c.token_hash == token_hash)
        ).first()
        return FeedJob(**row._mapping) if row is not None else None
