"""Service-layer rules against a fake unit of work: no database, no threads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from speechbatch import services
from speechbatch.adapters.read import ListStamp
from speechbatch.adapters.repositories import StaleJob, UserRecord
from speechbatch.adapters.uow import ReadScope
from speechbatch.config import Settings
from speechbatch.errors import AlreadyGenerating, NotFound, NothingToGenerate, ValidationError
from speechbatch.services import Limits
from tests.fakes import FakeRepository, FakeRunner, FakeUnitOfWork, FakeUowFactory

USER = UserRecord(id=1, organization_id=10, email="a@b.c")
LIMITS = Limits(voices=("alloy",), max_chars=10)


@pytest.fixture
def repo() -> FakeRepository:
    return FakeRepository()


@pytest.fixture
def uow(repo: FakeRepository) -> FakeUnitOfWork:
    return FakeUnitOfWork(repo)


@pytest.fixture
def factory(uow: FakeUnitOfWork) -> FakeUowFactory:
    return FakeUowFactory(uow)


def test_create_job_trims_and_stores(
    factory: FakeUowFactory, uow: FakeUnitOfWork, repo: FakeRepository
) -> None:
    job_id = services.create_job(factory, USER, "  T ", " alloy", [" a ", "b"], LIMITS)
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
    factory: FakeUowFactory,
    uow: FakeUnitOfWork,
    title: str,
    voice: str,
    texts: list[str],
    field: str,
) -> None:
    with pytest.raises(ValidationError) as info:
        services.create_job(factory, USER, title, voice, texts, LIMITS)
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
    factory: FakeUowFactory,
    uow: FakeUnitOfWork,
    repo: FakeRepository,
    refusal: str,
    error: type[Exception],
) -> None:
    repo.refusal = refusal
    runner = FakeRunner()
    with pytest.raises(error):
        services.start_generation(factory, Settings(), runner, USER, 1)
    assert runner.started == []
    assert uow.committed == 0


def test_won_claim_commits_then_starts_the_run(
    factory: FakeUowFactory, uow: FakeUnitOfWork, repo: FakeRepository
) -> None:
    repo.refusal = ""
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    runner = FakeRunner()
    services.start_generation(factory, Settings(), runner, USER, job_id, regenerate=True)
    assert repo.claims == [(job_id, True)]
    assert runner.started == [(job_id, 1)]
    assert uow.committed == 1


def test_claim_recovers_a_dead_run_first(
    factory: FakeUowFactory, uow: FakeUnitOfWork, repo: FakeRepository
) -> None:
    repo.refusal = ""
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    repo.stale = [StaleJob(job_id, 1, "worker", "host:1")]
    services.start_generation(factory, Settings(), FakeRunner(), USER, job_id)
    assert repo.recovered == repo.stale


def test_other_organizations_job_is_not_found(
    factory: FakeUowFactory, uow: FakeUnitOfWork, repo: FakeRepository
) -> None:
    job_id = repo.create_job(99, 1, "t", "alloy", ["a"])
    with pytest.raises(NotFound):
        services.get_job(factory, Settings(), USER, job_id)


def test_a_304_builds_no_answer(factory: FakeUowFactory, repo: FakeRepository) -> None:
    job_id = repo.create_job(10, 1, "t", "alloy", ["a", "b"])
    etag = services.read_job(ReadScope(factory), factory, Settings(), USER, job_id).etag
    built = repo.documents_built
    answer = services.read_job(
        ReadScope(factory), factory, Settings(), USER, job_id,
        if_none_match={etag}.__contains__, seen_etags={etag},
    )  # fmt: skip
    assert answer.not_modified and answer.body is None
    assert repo.documents_built == built


def test_a_live_job_is_read_without_a_recovery_pass(
    factory: FakeUowFactory, repo: FakeRepository
) -> None:
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    services.read_job(ReadScope(factory), factory, Settings(), USER, job_id)
    assert repo.recovered == []


def test_a_job_that_looks_dead_is_recovered_before_it_is_shown(
    factory: FakeUowFactory, repo: FakeRepository
) -> None:
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    repo.stale = [StaleJob(job_id, 1, "lease", None)]
    services.read_job(ReadScope(factory), factory, Settings(), USER, job_id)
    assert repo.recovered == repo.stale


@pytest.mark.parametrize(
    "paging", [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"status": "FINISHED"}]
)
def test_bad_item_paging_is_refused_before_reading(
    factory: FakeUowFactory, repo: FakeRepository, paging: dict[str, Any]
) -> None:
    job_id = repo.create_job(10, 1, "t", "alloy", ["a"])
    with pytest.raises(ValidationError):
        services.read_job_items(ReadScope(factory), factory, Settings(), USER, job_id, **paging)
    assert repo.documents_built == 0


def test_items_from_text_and_csv() -> None:
    assert services.parse_items_text("a\n\n  b  \r\nc") == ["a", "b", "c"]
    assert services.parse_items_csv('text\n"hello, world"\nsecond,ignored\n') == [
        "hello, world",
        "second",
    ]


def test_a_list_page_is_sent_with_the_etag_of_that_page(
    factory: FakeUowFactory, repo: FakeRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo.create_job(10, 1, "t", "alloy", ["a"])
    current = services.read_jobs(ReadScope(factory), factory, Settings(), USER)
    # The poll's stamp was read before a change that the page's statement then saw.
    monkeypatch.setattr(repo, "jobs_stamp", lambda *args, **kwargs: ListStamp(0))
    answer = services.read_jobs(ReadScope(factory), factory, Settings(), USER)
    assert answer.body is not None and json.loads(answer.body)["total"] == 1
    assert answer.etag == current.etag
