"""The schema of a document's structure: the chapters of a job made by an import, and the
job's cast (who speaks its lines in which voice)."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id


class Chapter(Base):
    """A job's chapter (from an imported document): its title and its first item."""

    __tablename__ = "chapters"
    __table_args__ = (UniqueConstraint("job_id", "index", name="uq_chapters_job_id_index"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    first_position: Mapped[int] = mapped_column(Integer)


class CastVoice(Base):
    """One member of a job's cast: the voice its ``speaker``'s lines are spoken with."""

    __tablename__ = "cast_voices"

    job_id: Mapped[int] = mapped_column(
        Id, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    speaker: Mapped[str] = mapped_column(String(50), primary_key=True)
    voice: Mapped[str] = mapped_column(String(100))
