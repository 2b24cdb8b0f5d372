"""Issue 29: the items of a 5,000-item job filtered by flag cost what the plain page costs.

``gunicorn wsgi:app -w 1 --threads 4`` on PostgreSQL, a fake provider that answers at
once. One COMPLETED job of 5,000 items; then 250 of its lines (every 20th) are edited
through the API (stale), and 250 others (every 20th, offset 10) are marked suspect in the
table (the fake's audio cannot be decoded, so no run would flag one). Two measurements,
each plain / stale / suspect in an order that turns every round:

- **polled** (what a page that polls feels): ``wrk -t2 -c8`` for DURATION seconds against
  ``GET /api/jobs/ID/items`` (the first 100 items), ``?stale=1`` and ``?suspect=1``, and
  against the job page ``/jobs/ID`` with ``?flag=stale`` / ``?flag=suspect`` (a signed-in
  session's cookie); the cost of a filtered answer is 1 / its requests per second;
- **built** (the database builds the answer again): the job's version is bumped (``PATCH``
  with its own voice, which changes nothing else), then each of the three API reads once,
  timed; SAMPLES rounds.

Target: every filtered cost / plain cost <= 1.2 (medians).

Usage: python bench/items_filters.py [--rounds 3] [--duration 5] [--samples 40]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from typing import Any

import psycopg
import requests
from _common import ADMIN_EMAIL, exit_on_sigterm, fake_provider, figure, median, write_results
from _http import Deployment, deployment, wrk

N_ITEMS = 5000
EVERY = 20
VARIANTS = ("plain", "stale", "suspect")


def prepare(app: Deployment) -> int:
    """The 5,000-item job, COMPLETED, with 250 stale and 250 suspect lines; its id."""
    job_id = app.api.create_job([f"sentence {i} of the filtered job" for i in range(N_ITEMS)], "f")
    app.api.call("POST", f"/api/jobs/{job_id}/generate", expect=202)
    app.api.wait_done(job_id, timeout=900)
    ids = [
        item["id"]
        for offset in range(0, N_ITEMS, 1000)
        for item in app.api.call("GET", f"/api/jobs/{job_id}/items?offset={offset}&limit=1000")[
            "items"
        ]
    ]
    with app.api.session() as session:
        for item_id in ids[::EVERY]:
            url = f"{app.api.base_url}/api/jobs/{job_id}/items/{item_id}"
            answer = session.patch(url, json={"text": f"edited line {item_id}."}, timeout=60)
            answer.raise_for_status()
    dsn = app.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The version bump makes every process build its answers again.
        conn.execute(
            "UPDATE items SET suspect = 'silent' WHERE id = ANY(%s)", (ids[EVERY // 2 :: EVERY],)
        )
        conn.execute("UPDATE jobs SET version = version + 1 WHERE id = %s", (job_id,))
    progress = app.api.call("GET", f"/api/jobs/{job_id}?items=none")["progress"]
    assert (progress["stale"], progress["suspect"]) == (N_ITEMS // EVERY, N_ITEMS // EVERY)
    return job_id


def session_cookie(app: Deployment) -> str:
    """A signed-in browser session's Cookie header."""
    with requests.Session() as browser:
        login = browser.get(f"{app.api.base_url}/login", timeout=30).text
        token = re.search(r'name="csrf_token" value="([^"]+)"', login)
        assert token is not None
        form = {"email": ADMIN_EMAIL, "password": "bench-pw-1", "csrf_token": token.group(1)}
        browser.post(f"{app.api.base_url}/login", data=form, timeout=30).raise_for_status()
        return "Cookie: " + "; ".join(f"{c.name}={c.value}" for c in browser.cookies)


def targets(app: Deployment, job_id: int) -> dict[str, tuple[str, list[str]]]:
    """name: (url, headers) of every polled read."""
    base, auth = app.api.base_url, f"Authorization: Bearer {app.api.token}"
    cookie = session_cookie(app)
    api = f"{base}/api/jobs/{job_id}/items"
    page = f"{base}/jobs/{job_id}"
    return {
        "api plain": (api, [auth]),
        "api stale": (f"{api}?stale=1", [auth]),
        "api suspect": (f"{api}?suspect=1", [auth]),
        "page plain": (page, [cookie]),
        "page stale": (f"{page}?flag=stale", [cookie]),
        "page suspect": (f"{page}?flag=suspect", [cookie]),
    }


def polled(found: dict[str, tuple[str, list[str]]], rounds: int, duration: float) -> Any:
    """Median requests per second of each polled read, and every wrk run."""
    for url, headers in found.values():  # warm up
        wrk(url, 1, 8, headers)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in found}
    for i in range(rounds):
        for name in found if i % 2 == 0 else reversed(found):
            url, headers = found[name]
            run = wrk(url, duration, 8, headers)
            if set(run["statuses"]) - {"200"}:
                raise SystemExit(f"{name}: answers other than 200: {run['statuses']}")
            runs[name].append(run)
            print(f"round {i + 1} {name}: {run['rps']:.0f} req/s", flush=True)
    return {name: median([r["rps"] for r in rs]) for name, rs in runs.items()}, runs


def built(app: Deployment, job_id: int, samples: int) -> dict[str, float]:
    """Median seconds of each API read right after the job's version changed."""
    voice = app.api.call("GET", f"/api/jobs/{job_id}?items=none")["voice"]
    urls = {
        "plain": f"/api/jobs/{job_id}/items",
        "stale": f"/api/jobs/{job_id}/items?stale=1",
        "suspect": f"/api/jobs/{job_id}/items?suspect=1",
    }
    seconds: dict[str, list[float]] = {name: [] for name in urls}
    with app.api.session() as session:
        for i in range(samples):
            order = list(urls)[i % 3 :] + list(urls)[: i % 3]
            for name in order:
                bump = session.patch(
                    f"{app.api.base_url}/api/jobs/{job_id}", json={"voice": voice}, timeout=60
                )
                bump.raise_for_status()
                started = time.perf_counter()
                answer = session.get(app.api.base_url + urls[name], timeout=60)
                seconds[name].append(time.perf_counter() - started)
                answer.raise_for_status()
    return {name: median(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    exit_on_sigterm()
    if shutil.which("wrk") is None:
        sys.exit("wrk is missing: apt-get install -y wrk")
    with fake_provider(0.0) as provider, deployment(provider.url, workers=1) as app:
        job_id = prepare(app)
        rate, runs = polled(targets(app, job_id), args.rounds, args.duration)
        cold = built(app, job_id, args.samples)
    print("median req/s: " + ", ".join(f"{name} {r:.0f}" for name, r in rate.items()))
    print("median s built: " + ", ".join(f"{name} {s * 1000:.1f} ms" for name, s in cold.items()))
    figures = {}
    for where in ("api", "page"):
        for flag in ("stale", "suspect"):
            cost = rate[f"{where} plain"] / rate[f"{where} {flag}"]
            figures[f"polled_{where}_{flag}"] = figure(
                f"polled {where} {flag}=1 cost / plain, 5,000 items", cost, "<= 1.2", cost <= 1.2
            )
    for flag in ("stale", "suspect"):
        cost = cold[flag] / cold["plain"]
        figures[f"built_api_{flag}"] = figure(
            f"built api {flag}=1 cost / plain, 5,000 items", cost, "<= 1.2", cost <= 1.2
        )
    write_results(
        "items_filters",
        {
            "params": vars(args),
            "median_rps": rate,
            "median_built_seconds": cold,
            "runs": runs,
            "figures": figures,
        },
    )


if __name__ == "__main__":
    main()
