"""Small helpers shared by the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import update

from speechbatch.app import Services
from speechbatch.models import Item, Job, Worker
from speechbatch.repository import UserRecord
from speechbatch.services import Limits, create_job

T = TypeVar("T")
LIMITS = Limits(voices=("alloy", "echo"), max_chars=4096)


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


def new_job(svc: Services, user: UserRecord, n: int = 3, title: str = "job") -> int:
    """A PENDING job with items 'text 1' .. 'text n'."""
    return create_job(
        svc.uow_factory, user, title, "alloy", [f"text {i}" for i in range(1, n + 1)], LIMITS
    )


def claim(svc: Services, user: UserRecord, job_id: int, *, worker_id: int | None = None,
          regenerate: bool = False) -> int | None:  # fmt: skip
    """Claim without starting a run (the test plays the run itself)."""
    with svc.uow_factory() as uow:
        attempt = uow.repo.claim_job(
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
    with svc.uow_factory() as uow:
        uow.session.execute(update(Job).where(Job.id == job_id).values(**values))
        uow.commit()


def set_items(svc: Services, job_id: int, *where: Any, **values: Any) -> None:
    """Write item columns directly."""
    with svc.uow_factory() as uow:
        uow.session.execute(update(Item).where(Item.job_id == job_id, *where).values(**values))
        uow.commit()


def set_worker(svc: Services, worker_id: int, **values: Any) -> None:
    """Write worker columns directly."""
    with svc.uow_factory() as uow:
        uow.session.execute(update(Worker).where(Worker.id == worker_id).values(**values))
        uow.commit()


def view(svc: Services, user: UserRecord, job_id: int) -> dict[str, Any]:
    """The job as the repository shows it, without recovery."""
    with svc.uow_factory() as uow:
        result = uow.repo.get_job_view(job_id, user.organization_id)
    assert result is not None
    return result


def statuses(job: dict[str, Any]) -> list[str]:
    """The statuses of a job's items in order."""
    return [i["status"] for i in job["items"]]
