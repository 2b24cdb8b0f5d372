"""A compare-and-set of one repository that another repository's statement carries.

An item's start writes several hot rows in one short transaction: its job's row (the
fence), the month's row of the ledger (the reservation), the provider slot it keeps for
its call. Each statement is a round trip, and the job's row stays locked from the fence
to the commit, so every round trip after the fence is time that the run's other threads
wait for that row. A rider lets a second compare-and-set travel with the carrier's
statement: on PostgreSQL as a data-modifying CTE of it (one round trip), elsewhere as a
statement of its own just before it. Either way its outcome comes back, as a won or lost
compare-and-set does, and the repository that owns the rider still writes its SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import TextualSelect


@dataclass(frozen=True)
class Rider:
    """A data-modifying statement with RETURNING (it won when it returns a row) and its
    parameters, whose names must not clash with the carrier's."""

    statement: TextualSelect
    params: Mapping[str, Any]

    def run(self, session: Session) -> bool:
        """Run it as a statement of its own: whether it won."""
        return session.execute(self.statement, dict(self.params)).first() is not None
