"""Slots benchmark: what the deployment-wide provider slots cost.

1. Batch overhead: a 96-item job at 100 ms provider latency, 8 items at a time, with
   ``PROVIDER_CONCURRENCY=8`` (a slot taken and released around every call, plus the 429
   pause check), against the same run with the slots switched off (a gate that grants at
   once, in the same process, interleaved). Figure: wall without / wall with, target >= 0.9.
2. Acquisition under contention: 50 threads of one process, serving 10 running jobs,
   compete for 8 slots through the runner's gate (each holds its slot ``--hold`` ms, then
   releases it); every acquire statement (one transaction, granted or refused) is timed.
   Figure: p99 under contention / p50 of an uncontended acquire, target <= 3. The wait
   until a slot is granted is reported too (it is mostly other holders' time), and so is
   the uncontended acquire's own p99 / p50: the machine's noise floor under that ratio
   (one thread, free slots, nothing else running in the process).
   A probe then measures what the process itself imposes: a read-only transaction of
   about an acquire's size (the count of slots in flight: no lock, no writer's turn,
   nothing the acquirers wait for), timed alone and then every 5 ms from a thread of its
   own during a second, identical contention (apart from the first, whose figure its
   load would change). Its p99 there / its p50 alone ("probe ratio") is how much slower
   any short transaction gets in a process whose 50 threads keep the interpreter busy.

Usage: python bench/slots.py [--items 96] [--latency 0.1] [--repeat 3] [--threads 50]
       [--slots 8] [--hold 5] [--seconds 5] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from typing import Any

from _common import (
    bench_admin,
    bench_settings,
    fake_provider,
    fresh_database,
    median,
    percentile,
    print_table,
    verdict,
    wait_for_runs,
    write_results,
)

from speechbatch import create_app
from speechbatch import services as svc
from speechbatch.app import Services
from speechbatch.repositories.slots import SlotGrant
from speechbatch.runner.gate import ProviderGate

BATCH_TARGET = 0.9
CONTENTION_TARGET = 3.0
CONTENTION_HEADER = ["backend", "alone p50 ms", "alone p99/p50", "contended p50",
                     "contended p99", "ratio", "probe ratio", "tries", "grant wait p50/p99 ms",
                     ""]  # fmt: skip


class UnlimitedGate(ProviderGate):
    """The runner without deployment-wide slots (the baseline): every take is granted
    at once without a statement (its release then matches no row)."""

    def take(self, slots: Any, job_id: int, attempt: int) -> SlotGrant:
        return SlotGrant(-1, -1)


def batch(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Median wall time of the batch with slots and without, interleaved."""
    walls: dict[str, list[float]] = {"slots": [], "unlimited": []}
    with fresh_database(backend, "slots_batch") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=8, provider_concurrency=8)
        provider = fake_provider(latency=args.latency)
        services: Services = create_app(settings, provider=provider).extensions["speechbatch"]
        limited_gate = services.runner.gate
        unlimited_gate = UnlimitedGate(
            services.runner._slot_tx, settings, services.runner.worker_id
        )
        try:
            user = bench_admin(services)
            services.runner.worker_id()
            # An untimed warm-up job first: the first job of a process pays for the pool's
            # connections and the first statements' compilation, and it would otherwise be
            # the first "unlimited" run, a bias in the ratio's favour.
            rounds = [("warm-up", limited_gate)]
            rounds += [("unlimited", unlimited_gate), ("slots", limited_gate)] * args.repeat
            for n, (mode, gate) in enumerate(rounds):
                services.runner.gate = services.runner.items.gate = gate
                # Distinct texts per run: reuse would skip the calls.
                texts = [f"{mode} run {n} item {i}" for i in range(args.items)]
                job_id = svc.create_job(
                    services.uow_factory, user, "batch", "alloy", texts, services.limits
                )
                t0 = time.perf_counter()
                svc.start_generation(services.uow_factory, settings, services.runner, user, job_id)
                wait_for_runs(services, 60)
                if mode in walls:
                    walls[mode].append(time.perf_counter() - t0)
                view = svc.get_job(services.uow_factory, settings, user, job_id)
                assert view["status"] == "COMPLETED", view["status"]
        finally:
            services.runner.gate = services.runner.items.gate = limited_gate
            services.runner.drain(5.0)
            services.engine.dispose()
    ideal = args.items * args.latency / 8
    with_slots, without = median(walls["slots"]), median(walls["unlimited"])
    return {
        "walls": walls,
        "ideal_seconds": ideal,
        "efficiency_with_slots": ideal / with_slots,
        "efficiency_without": ideal / without,
        "ratio": without / with_slots,
        "pass": without / with_slots >= BATCH_TARGET,
    }


class TimedGate(ProviderGate):
    """The runner's gate, timing every acquire (one transaction each)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tries: list[float] = []
        self._tries_lock = threading.Lock()

    def try_once(self, job_id: int, attempt: int) -> SlotGrant | None:
        t0 = time.perf_counter()
        grant = self._tx(lambda slots: self.take(slots, job_id, attempt))
        with self._tries_lock:
            self.tries.append(time.perf_counter() - t0)
        return grant


class Holder:
    """One call's slot through the gate: try, wait for a release, try again."""

    def __init__(self, gate: TimedGate, job_id: int, attempt: int) -> None:
        self.gate, self.job_id, self.attempt = gate, job_id, attempt
        self.grant: SlotGrant | None = None

    def acquire(self) -> None:
        while True:
            mark = self.gate.mark()
            self.grant = self.gate.try_once(self.job_id, self.attempt)
            if self.grant is not None:
                return
            self.gate.wait(mark, self.job_id, None)

    def release(self) -> None:
        if self.grant is not None:
            self.gate.release(self.grant, self.job_id)
            self.grant = None


def contention(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Acquire statement latency through the runner's gate: alone, then 50 threads for 8
    slots (spread over --jobs running jobs, so that several pollers ask at once)."""
    with fresh_database(backend, "slots_contention") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, provider_concurrency=args.slots)
        services: Services = create_app(settings, provider=fake_provider()).extensions[
            "speechbatch"
        ]
        runner = services.runner
        gate = TimedGate(runner._slot_tx, settings, runner.worker_id)
        try:
            user = bench_admin(services)
            running: list[tuple[int, int]] = []
            for n in range(args.jobs):
                job_id = svc.create_job(
                    services.uow_factory, user, f"job {n}", "alloy", ["x"], services.limits
                )
                with services.uow_factory() as uow:
                    attempt = uow.jobs.claim_job(
                        job_id, user.organization_id, regenerate=False, user_id=None,
                        worker_id=runner.worker_id(),
                    )  # fmt: skip
                    uow.commit()
                assert attempt is not None
                running.append((job_id, attempt))

            def holder(job: tuple[int, int]) -> Holder:
                return Holder(gate, *job)

            def probe() -> float:
                t0 = time.perf_counter()
                with services.uow_factory(read_only=True) as uow:
                    uow.slots.slots_in_flight(
                        worker_dead_seconds=settings.worker_dead_seconds,
                        max_hold_seconds=gate.max_hold_seconds,
                    )
                return time.perf_counter() - t0

            for _ in range(300):
                one = holder(running[0])
                one.acquire()
                one.release()
            alone = list(gate.tries)
            gate.tries.clear()
            probes_alone = [probe() for _ in range(300)]
            waits: list[float] = []
            probes: list[float] = []
            lock = threading.Lock()
            errors: list[BaseException] = []

            def contend(probing: bool) -> None:
                """50 threads for the slots during args.seconds (and the probe's thread)."""
                stop_at = time.monotonic() + args.seconds

                def contender(job: tuple[int, int]) -> None:
                    try:
                        while time.monotonic() < stop_at:
                            one = holder(job)
                            began = time.perf_counter()
                            one.acquire()
                            if not probing:
                                with lock:
                                    waits.append(time.perf_counter() - began)
                            time.sleep(args.hold / 1000)
                            one.release()
                    except BaseException as exc:
                        errors.append(exc)

                def prober() -> None:
                    while time.monotonic() < stop_at:
                        probes.append(probe())
                        time.sleep(0.005)

                threads = [
                    threading.Thread(target=contender, args=(running[n % args.jobs],))
                    for n in range(args.threads)
                ]
                if probing:
                    threads.append(threading.Thread(target=prober))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if errors:
                    raise errors[0]

            # The figure first, then the same contention again with the probe (its thread
            # and transactions add load of their own, so it runs apart).
            contend(probing=False)
            tries = list(gate.tries)
            contend(probing=True)
        finally:
            runner.drain(5.0)
            services.engine.dispose()
    alone_p50 = median(alone)
    p99 = percentile(tries, 99)
    return {
        "uncontended_p50_ms": alone_p50 * 1000,
        "uncontended_p99_ms": percentile(alone, 99) * 1000,
        "uncontended_p99_to_p50": percentile(alone, 99) / alone_p50,
        "contended_tries": len(tries),
        "contended_p50_ms": median(tries) * 1000,
        "contended_p99_ms": p99 * 1000,
        "grants": len(waits),
        "wait_to_grant_p50_ms": median(waits) * 1000,
        "wait_to_grant_p99_ms": percentile(waits, 99) * 1000,
        "ratio_p99_to_uncontended": p99 / alone_p50,
        "pass": p99 / alone_p50 <= CONTENTION_TARGET,
        "probe_alone_p50_ms": median(probes_alone) * 1000,
        "probe_contended_p99_ms": percentile(probes, 99) * 1000,
        "probe_ratio": percentile(probes, 99) / median(probes_alone),
        "probes": len(probes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=10, help="running jobs the threads serve")
    parser.add_argument("--hold", type=float, default=5.0, help="ms a slot is held")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {"params": vars(args)}
    for backend in backends:
        results[backend] = {"batch": batch(backend, args), "contention": contention(backend, args)}
    print_table(
        f"Batch with slots vs without: {args.items} x {args.latency * 1000:g} ms, 8 in flight, "
        f"PROVIDER_CONCURRENCY=8 (target without/with >= {BATCH_TARGET})",
        ["backend", "with slots (s)", "without (s)", "eff. with", "eff. without", "ratio", ""],
        [
            [
                b,
                " ".join(f"{w:.3f}" for w in results[b]["batch"]["walls"]["slots"]),
                " ".join(f"{w:.3f}" for w in results[b]["batch"]["walls"]["unlimited"]),
                results[b]["batch"]["efficiency_with_slots"],
                results[b]["batch"]["efficiency_without"],
                results[b]["batch"]["ratio"],
                verdict(results[b]["batch"]["pass"]),
            ]
            for b in backends
        ],
    )
    print_table(
        f"Acquire: {args.threads} threads for {args.slots} slots, held {args.hold:g} ms "
        f"(target p99 <= {CONTENTION_TARGET}x uncontended p50)",
        CONTENTION_HEADER,
        [
            [
                b,
                (c := results[b]["contention"])["uncontended_p50_ms"],
                c["uncontended_p99_to_p50"],
                c["contended_p50_ms"],
                c["contended_p99_ms"],
                c["ratio_p99_to_uncontended"],
                c["probe_ratio"],
                c["contended_tries"],
                f"{c['wait_to_grant_p50_ms']:.1f}/{c['wait_to_grant_p99_ms']:.1f}",
                verdict(c["pass"]),
            ]
            for b in backends
        ],
    )
    write_results("slots", results)


if __name__ == "__main__":
    main()
