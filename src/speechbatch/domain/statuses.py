"""Every status the product knows, one ``StrEnum`` each: the only source of these lists.

The models, the read side, the pages and the OpenAPI document all take their values from
here, so a new state is added in one place.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Job states: PENDING -> GENERATING -> COMPLETED | FAILED."""

    PENDING = "PENDING"
    GENERATING = "GENERATING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class ItemStatus(StrEnum):
    """Item states: PENDING -> GENERATING -> DONE | ERROR."""

    PENDING = "PENDING"
    GENERATING = "GENERATING"
    DONE = "DONE"
    ERROR = "ERROR"


class RunOutcome(StrEnum):
    """How a run ended (RUNNING while it is live)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"
    RECOVERED = "RECOVERED"
    CANCELLED = "CANCELLED"
    OVER_BUDGET = "OVER_BUDGET"


class ExportStatus(StrEnum):
    """Export states: RUNNING -> COMPLETED | FAILED."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class RenderStatus(StrEnum):
    """Render states: RUNNING -> COMPLETED | FAILED."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


def values(enum: type[StrEnum]) -> list[str]:
    """The enum's values in declaration order, as plain strings (for JSON schemas)."""
    return [str(member) for member in enum]
