"""Service-layer rules against a fake unit of work: no database, no threads."""

from __future__ import annotations

from typing import Any

import pytest

from speechbatch import services
from speechbatch.config import Settings
from speechbatch.errors import AlreadyGenerating, NotFound, NothingToGenerate, ValidationError
from speechbatch.repositories.spending import Usage
from speechbatch.repository import StaleJob, UserRecord
from speechbatch.services import Limits
from tests.fakes import FakeProvider

USER = UserRecord(id=1, organization_id=10, email="a@b.c", password_hash="x")
LIMITS = Limits(voices=("alloy",), max_chars=10)


class FakeRepository:
    """Just enough of the repository for the services under test."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.refusal = "already_generating"
        self.claims: list[tuple[int, bool]] = []
        self.stale: list[StaleJob] = []
        self.recovered: list[StaleJob] = []

    def create_job(self, org: int, user: int, title: str, voice: str, texts: list[str]) -> int:
        job_id = len(self.jobs) + 1
        self.jobs[job_id] = {"org": org, "title": title, "voice": voice, "texts": texts}
        return job_id

    def claim_job(self, job_id: int, org: int, *, regenerate: bool, user_id: int | None,
                  worker_id: int | None) -> int | None:  # fmt: skip
        self.claims.append((job_id, regenerate))
        return 1 if self.refusal == "" else None

    def claim_refusal(self, job_id: int, org: int) -> str:
        return self.refusal

    def get_job_view(self, job_id: int, org: int, **liveness: float) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is None or job["org"] != org:
            return None
        lease = {"worker": None, "worker_heartbeat_at": None, "last_progress_at": None}
        return {"id": job_id, "status": "PENDING", "lease": lease, **job}

    def find_stale_jobs(self, **kwargs: Any) -> list[StaleJob]:
        return list(self.stale)

    def find_orphan_item_jobs(self, **kwargs: Any) -> list[int]:
        return []

    def recover_stale_job(self, stale: StaleJob, **kwargs: Any) -> bool:
        self.recovered.append(stale)
        return True


class FakeSpending:
    """An organization without a budget: the claim's budget check passes."""

    def usage(self, organization_id: int) -> Usage:
        return Usage("2026-12", 0, 0, None)


class FakeUnitOfWork:
    def __init__(self, repo: FakeRepository) -> None:
        self.repo = repo
        self.spending = FakeSpending()
        self.committed = 0

    def __enter__(self) -> FakeUnitOfWork:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        self.committed += 1


class FakeRunner:
    provider = FakeProvider()

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []

    def worker_id(self) -> int:
        return 7

    def start(self, job_id: int, attempt: int) -> None:
        self.started.append((job_id, attempt))


@pytest.fixture
def repo() -> FakeRepository:
    return FakeRepository()


@pytest.fixture
def uow(repo: FakeRepository) -> FakeUnitOfWork:
    return FakeUnitOfWork(repo)


def test_create_job_trims_and_stores(uow: FakeUnitOfWork, repo: FakeRepository) -> None:
    job_id = services.create_job(lambda **kw: uow, USER, "  T ", " alloy", [" a ", "b"], LIMITS)  # type: ignore[arg-type,return-value]
    assert repo.jobs[job_id] == {"org": 10, "title": "T", "voice": "alloy", "texts": ["a", "b"]}
    assert uow.committed == 1


@pytest.mark.parametrize(
    "title,voice,texts,field",
    [
        ("", "alloy", ["a"], "title"),
        ("t", "nova", ["a"], "voice"),
        ("t", "alloy", [], "items"),
        ("t", "alloy", ["x" * 11], "items"),
        ("t", "alloy", [" "], "items"),
    ],
)
def test_invalid_input_names_the_field(
    uow: FakeUnitOfWork, title: str, voice: str, texts: list[str], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        services.create_job(lambda **kw: uow, USER, title, voice, texts, LIMITS)  # type: ignore[arg-type,return-value]
    assert info.value.field == field
    assert uow.committed == 0


@pytest.mark.parametrize(
    "refusal,error",
    [
        ("already_generating", AlreadyGenerating),
        ("nothing_to_generate", NothingToGenerate),
        ("not_found", NotFound),
    ],
)
def test_refused_claim_starts_nothing(
    uow: FakeUnitOfWork, repo: FakeRepository, refusal: str, error: type[Exception]
) -> None:
    repo.refusal = refusal
    runner = FakeRunner()
    with pytest.raises(error):
        services.start_generation(lambda **kw: uow, Settings(), runner, USER, 1)  # type: ignore[arg-type,return-value]
    assert runner.started == []
    assert uow.committed == 0


def test_won_claim_commits_then_starts_the_run(uow: FakeUnitOfWork, repo: FakeRepository) -> None:
    repo.refusal = ""
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    runner = FakeRunner()
    services.start_generation(lambda **kw: uow, Settings(), runner, USER, job_id, regenerate=True)  # type: ignore[arg-type,return-value]
    assert repo.claims == [(job_id, True)]
    assert runner.started == [(job_id, 1)]
    assert uow.committed == 1


def test_claim_recovers_a_dead_run_first(uow: FakeUnitOfWork, repo: FakeRepository) -> None:
    repo.refusal = ""
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    repo.stale = [StaleJob(job_id, 1, "worker", "host:1")]
    services.start_generation(lambda **kw: uow, Settings(), FakeRunner(), USER, job_id)  # type: ignore[arg-type,return-value]
    assert repo.recovered == repo.stale


def test_other_organizations_job_is_not_found(uow: FakeUnitOfWork, repo: FakeRepository) -> None:
    job_id = repo.create_job(99, 1, "t", "alloy", ["a"])
    with pytest.raises(NotFound):
        services.get_job(lambda **kw: uow, Settings(), USER, job_id)  # type: ignore[arg-type,return-value]


def test_items_from_text_and_csv() -> None:
    assert services.parse_items_text("a\n\n  b  \r\nc") == ["a", "b", "c"]
    assert services.parse_items_csv('text\n"hello, world"\nsecond,ignored\n') == [
        "hello, world",
        "second",
    ]
