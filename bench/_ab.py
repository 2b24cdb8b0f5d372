"""A/B in one run: two deployments side by side, each on its own database, the same rounds
alternating between them (A, B, B, A, ...), so that the machine's load falls on both.

A side is the keyword arguments of ``_http.deployment`` that make it differ (e.g.
``connect``: how it reaches its database). ``throughput`` runs figure 1 or 2 of
``throughput.py``; ``polls`` runs ``polling.py``'s reads with wrk; ``compare`` prints the
figures B / A.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from _common import fake_provider, figure, median
from _http import Deployment, deployment, wrk
from polling import endpoints
from throughput import FIGURES, SLOTS, one_round

Side = Mapping[str, Any]
# The reads of polling.py that the poll figures compare.
POLLED = ("full 50", "summary 5000", "304 5000")


@contextlib.contextmanager
def side_by_side(
    provider_url: str, sides: Mapping[str, Side], workers: int
) -> Iterator[dict[str, Deployment]]:
    """One running deployment per side; all stopped at the end."""
    with contextlib.ExitStack() as stack:
        yield {
            side: stack.enter_context(
                deployment(provider_url, workers=workers, PROVIDER_CONCURRENCY=SLOTS, **kwargs)
            )
            for side, kwargs in sides.items()
        }


def alternating(sides: Mapping[str, Side], n: int) -> list[str]:
    """The order of the sides in round ``n``: A, B, then B, A."""
    return list(sides) if n % 2 == 0 else list(reversed(list(sides)))


def throughput(sides: Mapping[str, Side], name: str, rounds: int) -> dict[str, list[float]]:
    """Alternated rounds of throughput figure ``name``; each side's efficiencies."""
    jobs, items, latency, _, _ = FIGURES[name]
    ideal = jobs * items * latency / SLOTS
    found: dict[str, list[float]] = {side: [] for side in sides}
    with fake_provider(latency) as provider, side_by_side(provider.url, sides, 2) as apps:
        for side, app in apps.items():
            one_round(app, f"warm-up {side}", jobs, 8, 5.0)
        for n in range(rounds):
            for side in alternating(sides, n):
                result = one_round(apps[side], f"{name} {n + 1} {side}", jobs, items, 5.0)
                found[side].append(ideal / result["seconds"])
                print(
                    f"{name} round {n + 1} {side}: efficiency {found[side][-1]:.3f}, "
                    f"jobs per worker {result['jobs_per_worker']}",
                    flush=True,
                )
    return found


def _polled_jobs(app: Deployment) -> dict[int, int]:
    """Three COMPLETED jobs of 10, 50 and 5,000 items: size -> id."""
    jobs = {}
    for n in (10, 50, 5000):
        jobs[n] = app.api.create_job([f"sentence {i} of the polled job" for i in range(n)], str(n))
        app.api.call("POST", f"/api/jobs/{jobs[n]}/generate", expect=202)
        app.api.wait_done(jobs[n], timeout=600)
    return jobs


def polls(sides: Mapping[str, Side], rounds: int, duration: float) -> dict[str, Any]:
    """Alternated wrk runs (``-t2 -c8``) of each polled read; requests per second."""
    found: dict[str, dict[str, list[float]]] = {name: {s: [] for s in sides} for name in POLLED}
    with fake_provider(0.0) as provider, side_by_side(provider.url, sides, 1) as apps:
        urls = {side: endpoints(app, _polled_jobs(app)) for side, app in apps.items()}
        for side in sides:
            for name in POLLED:
                url, headers, _ = urls[side][name]
                wrk(url, 1, 8, headers)  # warm up
        for n in range(rounds):
            for name in POLLED:
                for side in alternating(sides, n):
                    url, headers, status = urls[side][name]
                    run = wrk(url, duration, 8, headers)
                    if set(run["statuses"]) != {str(status)}:
                        raise SystemExit(f"{name} on {side}: answers {run['statuses']}")
                    found[name][side].append(run["rps"])
                    print(f"poll round {n + 1} {name} {side}: {run['rps']:.0f} req/s", flush=True)
    return found


def compare(label: str, found: Mapping[str, list[float]], a: str, b: str) -> dict[str, Any]:
    """Print and return the figure median(B) / median(A) (target: no more than 5% lost)."""
    ratio = median(found[b]) / median(found[a])
    return figure(f"{label}, {b} / {a}", ratio, ">= 0.95", ratio >= 0.95)
