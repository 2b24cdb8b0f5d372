"""Small helpers shared by the integration tests."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from unittest import mock

from sqlalchemy import func, select, update

from speechbatch.adapters.models import Item, Job, Run, Worker
from speechbatch.adapters.passwords import hash_password
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import Reader, SessionUowFactory, StatementReader, UowFactory
from speechbatch.app import Services
from speechbatch.services import Limits, create_admin, create_job
from speechbatch.services import users as users_service

T = TypeVar("T")
LIMITS = Limits(voices=("alloy", "echo"), max_chars=4096)


def concrete(factory: UowFactory) -> SessionUowFactory:
    """The app's own unit-of-work factory behind ``factory`` (typed as the Protocol):
    its units are the concrete Writer and Reader, with their ``session``, ``workers`` and
    the full slot repository, which the tests reach into."""
    assert isinstance(factory, SessionUowFactory), factory
    return factory


def statement_reader(factory: UowFactory) -> Reader | StatementReader:
    """``factory.statement_reader()`` as the concrete unit it is (typed as ReadUnit)."""
    reader = concrete(factory).statement_reader()
    assert isinstance(reader, Reader | StatementReader), reader
    return reader


def wait_for(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Poll until ``check`` returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last: {value!r})")
        time.sleep(interval)


@functools.cache
def _hashed_once(password: str) -> str:
    """A real salted scrypt hash (sign-in checks it), made once per password and session:
    one costs about 90 ms, and nearly every test makes an admin with the same password."""
    return hash_password(password)


def new_admin(
    svc: Services, organization: str, email: str, password: str = "password-1"
) -> UserRecord:
    """Create an admin of ``organization`` (created too if new); their user record."""
    with mock.patch.object(users_service, "hash_password", _hashed_once):
        create_admin(svc.uow_factory, organization, email, password)
    with svc.uow_factory(read_only=True) as uow:
        user = uow.users.get_user_by_email(email)
    assert user is not None
    return user


def new_job(svc: Services, user: UserRecord, n: int = 3, title: str = "job") -> int:
    """A PENDING job with items 'text 1' .. 'text n'."""
    return create_job(
        svc.uow_factory, user, title, "alloy", [f"text {i}" for i in range(1, n + 1)], LIMITS
    )


def claim(svc: Services, user: UserRecord, job_id: int, *, worker_id: int | None = None,
          regenerate: bool = False) -> int | None:  # fmt: skip
    """Claim without starting a run (the test plays the run itself)."""
    with svc.uow_factory() as uow:
        attempt = uow.jobs.claim_job(
            job_id, user.organization_id, regenerate=regenerate, user_id=user.id,
            worker_id=worker_id,
        )  # fmt: skip
        uow.commit()
    return attempt


def ago(seconds: float) -> datetime:
    """A UTC time ``seconds`` ago."""
    return datetime.now(UTC) - timedelta(seconds=seconds)


def set_job(svc: Services, job_id: int, **values: Any) -> None:
    """Write job columns directly (to age a run or wedge a state)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Job).where(Job.id == job_id).values(**values))
        uow.commit()


def set_items(svc: Services, job_id: int, *where: Any, **values: Any) -> None:
    """Write item columns directly (the job's counters follow, as the app's moves do)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Item).where(Item.job_id == job_id, *where).values(**values))
        uow.commit()
    resync_counters(svc, job_id)


def new_worker(svc: Services) -> int:
    """Register a worker (as a process does at its start); its id."""
    with concrete(svc.uow_factory)() as uow:
        worker_id = uow.workers.register_worker("test-host", 1)
        uow.commit()
    return worker_id


def set_worker(svc: Services, worker_id: int, **values: Any) -> None:
    """Write worker columns directly."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Worker).where(Worker.id == worker_id).values(**values))
        uow.commit()


def set_run(svc: Services, job_id: int, attempt: int, **values: Any) -> None:
    """Write run columns directly (to age a run's beat)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(Run).where(Run.job_id == job_id, Run.attempt == attempt).values(**values)
        )
        uow.commit()


def view(svc: Services, user: UserRecord, job_id: int) -> dict[str, Any]:
    """The job as the read side shows it, without recovery."""
    with svc.uow_factory(read_only=True) as uow:
        assert uow.views.job_head(job_id, user.organization_id) is not None
        result: dict[str, Any] = json.loads(uow.views.job_json(job_id, with_items=True))
    return result


def real_counts(svc: Services, job_id: int) -> dict[str, int]:
    """The job's items per status, counted from the items themselves."""
    with concrete(svc.uow_factory)(read_only=True) as uow:
        rows = uow.session.execute(
            select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
        ).all()
    counts = {s: 0 for s in ("PENDING", "GENERATING", "DONE", "ERROR")}
    counts.update({status: int(n) for status, n in rows})
    return counts


def counters(svc: Services, job_id: int) -> dict[str, int]:
    """The job row's progress counters."""
    with concrete(svc.uow_factory)(read_only=True) as uow:
        row = uow.session.execute(
            select(Job.items_pending, Job.items_generating, Job.items_done, Job.items_error).where(
                Job.id == job_id
            )
        ).one()
    return dict(zip(("PENDING", "GENERATING", "DONE", "ERROR"), map(int, row), strict=True))


def assert_counters_match(svc: Services, job_id: int) -> None:
    """The job row's progress counters equal its items' real statuses."""
    assert counters(svc, job_id) == real_counts(svc, job_id)


def resync_counters(svc: Services, job_id: int) -> None:
    """Set the counters from the items (after a test wrote items directly)."""
    counts = real_counts(svc, job_id)
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                items_pending=counts["PENDING"],
                items_generating=counts["GENERATING"],
                items_done=counts["DONE"],
                items_error=counts["ERROR"],
                version=Job.version + 1,
            )
        )
        uow.commit()


def statuses(job: dict[str, Any]) -> list[str]:
    """The statuses of a job's items in order."""
    return [i["status"] for i in job["items"]]
