"""In-process fakes shared by the tests."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, overload

from speechbatch.adapters.providers.base import (
    CharacterBilled,
    PermanentProviderError,
    RetryableProviderError,
    TTSProvider,
)
from speechbatch.adapters.read import ItemsPage, JobHead, JobPoll, ListPage, ListStamp
from speechbatch.adapters.repositories import (
    Credentials,
    Runs,
    SignIns,
    StaleJob,
    Tokens,
    UserRecord,
)
from speechbatch.adapters.repositories.books import Books
from speechbatch.adapters.repositories.cast import Casts
from speechbatch.adapters.repositories.deliveries import Deliveries
from speechbatch.adapters.repositories.edits import Edits
from speechbatch.adapters.repositories.exports import Exports
from speechbatch.adapters.repositories.feeds import Feeds
from speechbatch.adapters.repositories.idempotency import IdempotencyKeys
from speechbatch.adapters.repositories.impacts import Impacts
from speechbatch.adapters.repositories.job_locks import Locks
from speechbatch.adapters.repositories.ledger import ProviderUsage, Usage
from speechbatch.adapters.repositories.lexicon import (
    DoneItem,
    Lexicons,
    LexiconStamp,
    PassClaim,
    PassState,
    SpokenRow,
)
from speechbatch.adapters.repositories.renders import Renders
from speechbatch.adapters.repositories.resume import Resumes
from speechbatch.adapters.repositories.sessions import Sessions
from speechbatch.adapters.repositories.slots import SlotReads
from speechbatch.adapters.repositories.spending_reads import JobItems
from speechbatch.adapters.repositories.takes import Takes
from speechbatch.adapters.repositories.webhooks import Webhooks
from speechbatch.adapters.repositories.workers import Workers
from speechbatch.domain.lexicon import Rule


def fake_audio(text: str) -> bytes:
    """Deterministic bytes standing for the audio of ``text``."""
    return b"ID3FAKE" + hashlib.sha256(text.encode()).digest()


class FakeProvider(CharacterBilled):
    """A provider that counts every (billed) call per text, with latency and faults."""

    name = "fake"
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(self, voices: tuple[str, ...] = ("alloy", "echo"), latency: float = 0.0) -> None:
        self.voices = voices
        self.latency = latency
        self.calls: Counter[str] = Counter()
        self.fail_texts: dict[str, Exception] = {}
        self.gate: threading.Event | None = None  # when set, calls wait for it
        self.in_flight = 0
        self.max_in_flight = 0
        self.started: list[tuple[str, float]] = []  # (text, time.monotonic()) per call
        self.options_seen: list[dict[str, Any]] = []  # the options of every call
        self.voices_seen: list[tuple[str, str]] = []  # (text, voice) of every call
        self.audio: dict[str, bytes] = {}  # real audio to answer for a text, else fake_audio
        self._lock = threading.Lock()

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        with self._lock:
            self.calls[text] += 1
            self.options_seen.append(dict(options or {}))
            self.voices_seen.append((text, voice))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.started.append((text, time.monotonic()))
        try:
            if self.gate is not None:
                self.gate.wait(30)
            if self.latency:
                time.sleep(self.latency)
            error = self.fail_texts.get(text)
            if error is not None:
                raise error
            return self.audio.get(text) or fake_audio(text)
        finally:
            with self._lock:
                self.in_flight -= 1

    def total_calls(self) -> int:
        """How many calls were made in all."""
        with self._lock:
            return sum(self.calls.values())


def permanent(message: str = "bad input") -> PermanentProviderError:
    """A permanent provider failure."""
    return PermanentProviderError(message, status=400)


def retryable(message: str = "overloaded") -> RetryableProviderError:
    """A transient provider failure."""
    return RetryableProviderError(message, status=503)


def rate_limited(retry_after: float) -> RetryableProviderError:
    """A 429 with Retry-After."""
    return RetryableProviderError("rate limited", status=429, retry_after=retry_after)


class FakeRepository:
    """Jobs, recovery, views and users in memory: the repositories' Protocols, no SQL."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.refusal = "already_generating"
        self.claims: list[tuple[int, bool]] = []
        self.stale: list[StaleJob] = []
        self.recovered: list[StaleJob] = []
        self.users: dict[int, UserRecord] = {}
        self.password_hashes: dict[int, str] = {}
        self.documents_built = 0  # job, items and list documents answered

    # Jobs
    def create_job(
        self,
        organization_id: int,
        user_id: int | None,
        title: str,
        voice: str,
        texts: Sequence[str],
        *,
        keys: Sequence[str | None] | None = None,
        item_chapters: Sequence[int] | None = None,
        chapters: Sequence[tuple[int, str, int]] | None = None,
        options: str = "{}",
        speakers: Sequence[str | None] | None = None,
    ) -> int:
        job_id = len(self.jobs) + 1
        self.jobs[job_id] = {
            "org": organization_id, "title": title, "voice": voice, "texts": list(texts),
        }  # fmt: skip
        extras = {
            "keys": keys, "item_chapters": item_chapters, "chapters": chapters,
            "speakers": speakers,
        }  # fmt: skip
        self.jobs[job_id].update({k: list(v) for k, v in extras.items() if v})
        return job_id

    def claim_job(
        self,
        job_id: int,
        organization_id: int,
        *,
        regenerate: bool,
        user_id: int | None,
        worker_id: int | None,
        kind: str | None = None,
        expected_attempt: int | None = None,
    ) -> int | None:
        self.claims.append((job_id, regenerate))
        return 1 if self.refusal == "" else None

    def claim_refusal(self, job_id: int, organization_id: int) -> str:
        return self.refusal

    # Recovery
    def find_stale_jobs(
        self,
        *,
        lease_seconds: float,
        worker_dead_seconds: float,
        organization_id: int | None = None,
        job_id: int | None = None,
    ) -> list[StaleJob]:
        return list(self.stale)

    def recover_stale_job(
        self, stale: StaleJob, *, lease_seconds: float, worker_dead_seconds: float, message: str
    ) -> bool:
        self.recovered.append(stale)
        return True

    def find_orphan_item_jobs(
        self, *, organization_id: int | None = None, job_id: int | None = None
    ) -> list[int]:
        return []

    def recover_orphan_items(self, job_id: int, message: str) -> bool:
        return False

    def anything_to_recover(
        self, organization_id: int, *, lease_seconds: float, worker_dead_seconds: float
    ) -> bool:
        return bool(self.stale)

    # Views
    def ping(self) -> None:
        pass

    def item_audio(self, job_id: int, item_id: int, organization_id: int) -> str | None:
        return None

    def job_head(
        self,
        job_id: int,
        organization_id: int,
        *,
        lease_seconds: float | None = None,
        worker_dead_seconds: float | None = None,
    ) -> JobHead | None:
        job = self.jobs.get(job_id)
        if job is None or job["org"] != organization_id:
            return None
        counts = {"PENDING": len(job["texts"]), "GENERATING": 0, "DONE": 0, "ERROR": 0}
        return JobHead(
            id=job_id, version=1, status="PENDING", attempt=0, counts=counts,
            needs_recovery=any(s.job_id == job_id for s in self.stale), worker=None,
            last_progress_at=datetime(2026, 1, 1, tzinfo=UTC),
            reclaim_count=0,
        )  # fmt: skip

    def poll_job(
        self,
        job_id: int,
        *,
        token_hash: str | None = None,
        organization_id: int | None = None,
        with_items: bool = True,
        page: ItemsPage | None = None,
        seen_version: int | None = None,
        lease_seconds: float,
        worker_dead_seconds: float,
    ) -> JobPoll | None:
        if token_hash is not None:
            return None  # the fake knows no tokens
        assert organization_id is not None
        head = self.job_head(job_id, organization_id)
        if head is None or head.version == seen_version:
            return JobPoll(None, head, None)
        if page is None:
            document = self.job_json(job_id, with_items=with_items)
        else:
            document = self.items_json(job_id, page)
        return JobPoll(None, head, document)

    def job_json(self, job_id: int, *, with_items: bool) -> str:
        self.documents_built += 1
        job = self.jobs[job_id]
        document = {"id": job_id, "status": "PENDING", "title": job["title"], "runs": []}
        if with_items:
            document["items"] = [{"text": t} for t in job["texts"]]
        return json.dumps(document)

    def items_json(self, job_id: int, page: ItemsPage) -> str:
        self.documents_built += 1
        texts = self.jobs[job_id]["texts"][page.offset : page.offset + page.limit]
        return json.dumps([{"text": t} for t in texts])

    def jobs_stamp(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int = 0,
        limit: int = 0,
        q: str | None = None,
    ) -> ListStamp:
        return self._list_stamp(organization_id, offset, limit)

    def _list_stamp(self, organization_id: int, offset: int, limit: int) -> ListStamp:
        ids = sorted((i for i, j in self.jobs.items() if j["org"] == organization_id), reverse=True)
        return ListStamp(len(ids), ",".join(f"{i}:1" for i in ids[offset : offset + limit]))

    def jobs_page(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int,
        limit: int,
        q: str | None = None,
    ) -> ListPage:
        self.documents_built += 1
        ids = sorted((i for i, j in self.jobs.items() if j["org"] == organization_id), reverse=True)
        document = json.dumps([{"id": i} for i in ids[offset : offset + limit]])
        return ListPage(self._list_stamp(organization_id, offset, limit), document)

    # Users
    def get_or_create_organization(self, slug: str) -> int:
        return 10

    def create_user(self, organization_id: int, email: str, password_hash: str) -> int | None:
        user = UserRecord(len(self.users) + 1, organization_id, email)
        self.users[user.id] = user
        self.password_hashes[user.id] = password_hash
        return user.id

    def get_user_by_email(self, email: str) -> UserRecord | None:
        return next((u for u in self.users.values() if u.email == email), None)

    def get_credentials(self, email: str) -> Credentials | None:
        user = self.get_user_by_email(email)
        return None if user is None else Credentials(user, self.password_hashes[user.id])

    def get_user(self, user_id: int) -> UserRecord | None:
        return self.users.get(user_id)

    def set_password_hash(self, email: str, password_hash: str) -> bool:
        user = self.get_user_by_email(email)
        if user is None:
            return False
        self.password_hashes[user.id] = password_hash
        return True


class FakeSpending:
    """The ledger of organizations without a budget (so a claim's budget check passes),
    and no stored audio: nothing is reused, no key is referenced."""

    def __init__(self) -> None:
        self.budgets: dict[str, int | None] = {}

    def usage(self, organization_id: int) -> Usage:
        return Usage("2026-12", 0, 0, None)

    def usage_by_provider(self, organization_id: int) -> list[ProviderUsage]:
        return []

    def set_budget(self, slug: str, characters: int | None) -> int | None:
        self.budgets[slug] = characters
        return 1

    def job_items(self, job_id: int, organization_id: int) -> JobItems | None:
        return None

    def job_stamp(self, job_id: int, organization_id: int) -> tuple[int, Any] | None:
        return None

    def longest_unsent(self, job_id: int, organization_id: int, *, regenerate: bool) -> int | None:
        return None

    def reusable_fingerprints(self, fingerprints: Iterable[str]) -> set[str]:
        return set()

    def referenced_keys(self, keys: Iterable[str]) -> set[str]:
        return set()


class FakeLexicon:
    """An organization without pronunciation rules: every text is spoken as written."""

    def rules(self, organization_id: int) -> tuple[LexiconStamp, list[Rule]]:
        return LexiconStamp(0, None), []

    def stamp(self, organization_id: int) -> LexiconStamp:
        return LexiconStamp(0, None)

    def state(self, organization_id: int) -> PassState:
        return PassState(0, False, False)

    def replace_rules(self, organization_id: int, rules: Sequence[Rule]) -> int:
        raise NotImplementedError

    def pass_due(self) -> bool:
        return False

    def claim_stale_pass(self, lease_seconds: float) -> PassClaim | None:
        return None

    def renew_pass(self, claim: PassClaim, lease_seconds: float) -> bool:
        return False

    def finish_pass(self, claim: PassClaim) -> bool:
        return False

    def release_pass(self, claim: PassClaim) -> None:
        pass

    def due_jobs(self, organization_id: int, version: int) -> list[int]:
        return []

    def lock_items_to_judge(
        self, job_id: int, version: int, after: int, limit: int
    ) -> list[DoneItem]:
        return []

    def record_spoken(self, job_id: int, version: int, rows: Sequence[SpokenRow]) -> None:
        pass

    def finish_job(self, job_id: int, version: int) -> bool:
        return False

    def done_item(self, job_id: int, item_id: int) -> DoneItem | None:
        return None

    def set_stale(self, job_id: int, stale: Sequence[int], fresh: Sequence[int]) -> None:
        pass

    def done_items(self, organization_id: int) -> Generator[DoneItem, None, None]:
        yield from ()


class FakeUnitOfWork:
    """A unit of work over one FakeRepository that counts commits."""

    # Typed, never set: the services under test do not reach them (exports, feeds, locks, tokens,
    # sign-ins, resume, workers and the runner's moves have integration tests on both
    # databases).
    exports: Exports
    workers: Workers
    renders: Renders
    feeds: Feeds
    books: Books
    locks: Locks
    tokens: Tokens
    sessions: Sessions
    sign_ins: SignIns
    resume: Resumes
    runs: Runs
    slots: SlotReads
    webhooks: Webhooks
    deliveries: Deliveries
    takes: Takes
    cast: Casts
    edits: Edits
    idempotency: IdempotencyKeys
    impacts: Impacts

    def __init__(self, repo: FakeRepository) -> None:
        self.repo = repo
        self.committed = 0
        self.spending = FakeSpending()
        self.lexicon: Lexicons = FakeLexicon()

    @property
    def jobs(self) -> FakeRepository:
        return self.repo

    @property
    def recovery(self) -> FakeRepository:
        return self.repo

    @property
    def views(self) -> FakeRepository:
        return self.repo

    @property
    def users(self) -> FakeRepository:
        return self.repo

    def __enter__(self) -> FakeUnitOfWork:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        self.committed += 1


class FakeUowFactory:
    """``uow_factory()`` and ``uow_factory(read_only=True)`` both give the one fake."""

    def __init__(self, uow: FakeUnitOfWork) -> None:
        self.uow = uow

    @overload
    def __call__(self, *, read_only: Literal[False] = ...) -> FakeUnitOfWork: ...
    @overload
    def __call__(self, *, read_only: Literal[True]) -> FakeUnitOfWork: ...
    def __call__(self, *, read_only: bool = False) -> FakeUnitOfWork:
        return self.uow

    def statement_reader(self) -> FakeUnitOfWork:
        return self.uow

    def impatient_writer(self) -> FakeUnitOfWork:
        return self.uow


class FakeRunner:
    """Records the runs it was asked to start."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.provider: TTSProvider = FakeProvider()

    def worker_id(self) -> int:
        return 7

    def start(self, job_id: int, attempt: int) -> None:
        self.started.append((job_id, attempt))
