"""A job as a book: its author and cover, and what a render writes in its tags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

from sqlalchemy import Table, and_, func, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.images import stored_type
from speechbatch.adapters.models import Take
from speechbatch.adapters.models_outputs import Render
from speechbatch.adapters.repositories.tables import items, jobs

takes = cast(Table, Take.__table__)
renders = cast(Table, Render.__table__)


@dataclass(frozen=True)
class BookInfo:
    """What a render's tags say of its job: title, author, cover, voices and year."""

    title: str
    author: str | None
    cover_path: str | None
    voices: list[str]  # the voices of the current takes, in order of first use
    year: int

    @property
    def cover_type(self) -> str | None:
        """The cover's MIME type (its key ends with what it is)."""
        return None if self.cover_path is None else stored_type(self.cover_path)


class Books(Protocol):
    """What the services need of a job as a book."""

    def set_author(self, job_id: int, organization_id: int, author: str | None) -> bool: ...
    def cover_of(self, job_id: int, organization_id: int) -> tuple[bool, str | None]: ...
    def set_cover(self, job_id: int, organization_id: int, key: str) -> str | None: ...
    def book_info(self, render_id: int, job_id: int) -> BookInfo: ...


class BookRepository:
    """Authors and covers of jobs, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def set_author(self, job_id: int, organization_id: int, author: str | None) -> bool:
        """Set the job's author (bumping its version: the ETags change); whether the job
        exists in that organization."""
        row = self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
            .values(author=author, version=jobs.c.version + 1, updated_at=db_now())
            .returning(jobs.c.id)
        ).first()
        return row is not None

    def cover_of(self, job_id: int, organization_id: int) -> tuple[bool, str | None]:
        """Whether the job exists in that organization, and its cover's key."""
        row = self.session.execute(
            select(jobs.c.cover_path).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        return (False, None) if row is None else (True, row.cover_path)

    def set_cover(self, job_id: int, organization_id: int, key: str) -> str | None:
        """Make ``key`` the job's cover (the row locked, its version bumped); the key it
        replaces, if any. The caller has checked that the job exists."""
        old = self.session.execute(
            select(jobs.c.cover_path)
            .where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
            .with_for_update()
        ).scalar_one_or_none()
        self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
            .values(cover_path=key, version=jobs.c.version + 1, updated_at=db_now())
        )
        return old

    def book_info(self, render_id: int, job_id: int) -> BookInfo:
        """The job's title, author and cover, the voices its current takes were spoken
        with (the job's voice when none says), and the year the render was asked for."""
        job = self.session.execute(
            select(
                jobs.c.title, jobs.c.author, jobs.c.cover_path, jobs.c.voice, renders.c.created_at
            )
            .join(renders, renders.c.job_id == jobs.c.id)
            .where(jobs.c.id == job_id, renders.c.id == render_id)
        ).one()
        first_use = func.min(items.c.position)
        voices: list[str] = list(
            self.session.execute(
                select(takes.c.voice)
                .join(
                    items,
                    and_(items.c.id == takes.c.item_id, items.c.current_take == takes.c.take),
                )
                .where(items.c.job_id == job_id)
                .group_by(takes.c.voice)
                .order_by(first_use)
            ).scalars()
        )
        return BookInfo(
            title=job.title,
            author=job.author,
            cover_path=job.cover_path,
            voices=voices or [job.voice],
            year=job.created_at.year,
        )
