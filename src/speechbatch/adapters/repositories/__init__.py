"""One small repository per concept; only they (and the read side) write SQL.

Every compare-and-set is one named method that returns whether it won; callers never
look at row counts. Methods run inside the caller's unit of work and never commit.
"""

from __future__ import annotations

from speechbatch.adapters.repositories.jobs import Jobs, JobsRepository
from speechbatch.adapters.repositories.recovery import Recovery, RecoveryRepository, StaleJob
from speechbatch.adapters.repositories.runs import Runs, RunsRepository, StartedItem
from speechbatch.adapters.repositories.sign_ins import AttemptCount, SignInRepository, SignIns
from speechbatch.adapters.repositories.tables import audio_url
from speechbatch.adapters.repositories.tokens import (
    TokenOwner,
    TokenRecord,
    TokenRepository,
    Tokens,
)
from speechbatch.adapters.repositories.users import Credentials, UserRecord, Users, UsersRepository
from speechbatch.adapters.repositories.workers import Workers, WorkersRepository

__all__ = [
    "AttemptCount",
    "Credentials",
    "Jobs",
    "JobsRepository",
    "Recovery",
    "RecoveryRepository",
    "Runs",
    "RunsRepository",
    "SignInRepository",
    "SignIns",
    "StaleJob",
    "StartedItem",
    "TokenOwner",
    "TokenRecord",
    "TokenRepository",
    "Tokens",
    "UserRecord",
    "Users",
    "UsersRepository",
    "Workers",
    "WorkersRepository",
    "audio_url",
]
