"""What would a structural change to the runner buy? Upper bounds, measured, not built.

The PostgreSQL batch of ``batch.py`` (96 items x 100 ms, 8 in flight, a budget set) in
four variants, alternating round by round in one process on one database, so that every
figure is a ratio to the code as it is, in the same minutes:

- **as is**: the runner unchanged;
- **no audio write**: ``LocalStorage.write`` does nothing (the audio file, its fsync and
  rename leave the path between two calls: the bound of moving them to another thread);
- **no slot or ledger statement**: the slot's renewal and the call's reservation are not
  sent (the bound of folding both into the item's one fenced statement);
- **pipelined**: twice the item threads, and the provider call behind a first-come
  first-served permit of 8 per run, so that one thread's next item is started (its
  transaction committed) while its call is in flight and the call leaves as soon as a
  permit is free. This is the bound of a runner that starts an item ahead of its call;
  it is not a design that could ship as measured: it reserves the characters of the
  item started ahead before its call, so a crash there would bill a call never sent;
- **grouped commits**: the transactions of a run's item threads that arrive while one is
  in progress run together in the next one (one thread leads, the others wait for its
  commit): the bound of a per-run committer that takes the job's row out of the
  threads' way. On any error the group falls back to one transaction per item.

These variants change the runner's internals from outside (monkeypatching): they are
experiments, nothing of them is in ``src``. No target: they say how far each kind of
change can take the 0.9 of issues 8.4 and 9.

Usage: python bench/bounds.py [--rounds 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from _common import (
    bench_admin,
    bench_settings,
    fake_provider,
    fresh_database,
    median,
    print_table,
    wait_for_runs,
    write_results,
)

from speechbatch import create_app, spending
from speechbatch import services as svc
from speechbatch.app import Services
from speechbatch.repositories import spending as spending_repository
from speechbatch.repositories.slots import SlotGrant, SlotRepository
from speechbatch.runner import lifecycle as runner_module
from speechbatch.runner.transactions import Transactions
from speechbatch.storage import LocalStorage

ITEMS, LATENCY, IN_FLIGHT = 96, 0.1, 8
IDEAL = ITEMS * LATENCY / IN_FLIGHT


class FifoPermits:
    """``n`` permits, handed out in the order they were asked for."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._lock = threading.Lock()
        self._waiting: collections.deque[threading.Event] = collections.deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def as_is() -> Iterator[None]:
    yield


@contextlib.contextmanager
def no_audio_write() -> Iterator[None]:
    with patched(LocalStorage, "write", lambda self, key, data: None):
        yield


@contextlib.contextmanager
def no_slot_or_ledger_statement() -> Iterator[None]:
    # Every reservation fits and every slot is granted, without a statement.
    def reserve(self: Any, organization_id: int, job_id: int, attempt: int, n: int) -> Any:
        return spending_repository.Reservation(0, job_id, n, "")

    def acquire(self: Any, *args: Any, **kwargs: Any) -> Any:
        return SlotGrant(-1, -1)

    with (
        patched(spending_repository.SpendingRepository, "reserve_characters", reserve),
        patched(SlotRepository, "acquire_slot", acquire),
    ):
        yield


@contextlib.contextmanager
def pipelined() -> Iterator[None]:
    run = runner_module.Runner._run

    def run_pipelined(self: runner_module.Runner, job_run: Any) -> None:
        permits = FifoPermits(self.settings.item_concurrency)
        inner = self.provider

        class Permitted:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def synthesize(self, text: str, voice: str) -> bytes:
                permits.acquire()
                try:
                    return inner.synthesize(text, voice)
                finally:
                    permits.release()

        threads = self.settings.item_concurrency
        self.provider = Permitted()
        object.__setattr__(self.settings, "item_concurrency", 2 * threads)
        try:
            run(self, job_run)
        finally:
            object.__setattr__(self.settings, "item_concurrency", threads)
            self.provider = inner

    with patched(runner_module.Runner, "_run", run_pipelined):
        yield


class _Request:
    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class CommitGroups:
    """Leader and followers: whoever finds no transaction in progress runs every
    request queued so far in one transaction; the others wait for its commit."""

    def __init__(self, transactions: Transactions, alone: Callable[[Any], Any]) -> None:
        self._transactions = transactions
        self._alone = alone
        self._turn = threading.Condition()
        self._queue: list[_Request] = []
        self._leading = False
        self.sizes: collections.Counter[int] = collections.Counter()

    def run(self, work: Callable[[Any], Any]) -> Any:
        request = _Request(work)
        with self._turn:
            self._queue.append(request)
            while not request.done and self._leading:
                self._turn.wait()
            group: list[_Request] | None = None
            if not request.done:
                self._leading = True
                group, self._queue = self._queue, []
        if group is not None:
            try:
                self._execute(group)
            finally:
                with self._turn:
                    self._leading = False
                    self._turn.notify_all()
        if request.error is not None:
            raise request.error
        return request.result

    def _execute(self, group: list[_Request]) -> None:
        self.sizes[len(group)] += 1
        if len(group) > 1:
            try:
                with self._transactions.uow_factory() as uow:
                    results = [r.work(uow) for r in group]
                    uow.commit()
            except Exception:
                pass  # rolled back: each request again, alone
            else:
                for r, result in zip(group, results, strict=True):
                    r.result, r.done = result, True
                return
        for r in group:
            try:
                r.result = self._alone(r.work)
            except BaseException as exc:
                r.error = exc
            r.done = True


ITEM_THREAD = re.compile(r"^speechbatch-job-\d+-a\d+-\d+$")


@contextlib.contextmanager
def grouped_commits() -> Iterator[None]:
    tx = Transactions.__call__
    groups: dict[int, CommitGroups] = {}

    def grouped_tx(self: Transactions, work: Callable[[Any], Any]) -> Any:
        if not ITEM_THREAD.match(threading.current_thread().name):
            return tx(self, work)
        group = groups.setdefault(id(self), CommitGroups(self, lambda w: tx(self, w)))
        return group.run(work)

    with patched(Transactions, "__call__", grouped_tx):
        yield


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "as is": as_is,
    "no audio write": no_audio_write,
    "no slot or ledger statement": no_slot_or_ledger_statement,
    "pipelined (2 x threads, 8 call permits)": pipelined,
    "grouped commits": grouped_commits,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="jobs per variant per round")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with fresh_database("postgresql", "bounds") as url, tempfile.TemporaryDirectory() as tmp:
        # Slots for twice the threads, so that the pipelined variant's extra threads
        # start their items without waiting for a slot (its permits cap the calls at 8).
        settings = bench_settings(
            url, tmp, item_concurrency=IN_FLIGHT, provider_concurrency=2 * IN_FLIGHT
        )
        provider = fake_provider(latency=LATENCY)
        app = create_app(settings, provider=provider)
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            spending.set_budget(services.uow_factory, "bench", 10**9)
            services.runner.worker_id()
            for n in range(args.rounds):
                for name, variant in VARIANTS.items():
                    for repeat in range(args.repeat):
                        texts = [f"{name} {n} {repeat} item {i}" for i in range(ITEMS)]
                        job_id = svc.create_job(
                            services.uow_factory, user, "bounds", "alloy", texts, services.limits
                        )
                        with variant():
                            t0 = time.perf_counter()
                            svc.start_generation(
                                services.uow_factory, settings, services.runner, user, job_id
                            )
                            wait_for_runs(services, timeout=60)
                            walls[name].append(time.perf_counter() - t0)
                        view = svc.get_job(services.uow_factory, settings, user, job_id)
                        assert view["status"] == "COMPLETED", (name, view["status"])
        finally:
            services.runner.drain(5.0)
            services.dispose()
    base = median(walls["as is"])
    results: dict[str, Any] = {
        "params": vars(args) | {"items": ITEMS, "latency": LATENCY, "in_flight": IN_FLIGHT},
        "variants": {
            name: {
                "wall_seconds": w,
                "wall_seconds_median": median(w),
                "efficiency": IDEAL / median(w),
                "speedup_vs_as_is": base / median(w),
            }
            for name, w in walls.items()
        },
    }
    print_table(
        f"Bounds: {ITEMS} x {LATENCY * 1000:g} ms, {IN_FLIGHT} in flight, PostgreSQL "
        f"({args.rounds} rounds x {args.repeat} jobs per variant, alternating)",
        ["variant", "median s", "efficiency", "vs as is"],
        [
            [name, v["wall_seconds_median"], v["efficiency"], v["speedup_vs_as_is"]]
            for name, v in results["variants"].items()
        ],
    )
    write_results("bounds", results)


if __name__ == "__main__":
    main()
