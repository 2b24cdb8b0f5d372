"""What every benchmark shares: a throw-away database, the app's environment, the fake
provider's process, figures and their verdicts.

Nothing here imports ``speechbatch`` or the tests: the app is configured by its
``SPEECHBATCH_*`` variables and set up through ``flask --app wsgi`` (its CLI contract), so
the same helpers serve any commit of the code.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import requests

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
VENV_BIN = ROOT / ".venv" / "bin"
PG_ADMIN_DSN = os.environ.get(
    "SPEECHBATCH_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
ADMIN_EMAIL = "bench@bench.test"


def quickstart_env(folder: Path, secret: str) -> dict[str, str]:
    """The quick start's environment on a fresh SQLite file in ``folder`` (Piper, the
    metrics of every worker counted in ``folder/prometheus``), without the caller's
    ``SPEECHBATCH_`` settings."""
    metrics = folder / "prometheus"
    metrics.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
    env.update(
        SPEECHBATCH_DATABASE_URL=f"sqlite:///{folder}/speechbatch.db",
        SPEECHBATCH_SECRET_KEY=secret,
        SPEECHBATCH_TTS_PROVIDER="piper",
        SPEECHBATCH_STORAGE_DIR=f"{folder}/audio",
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
    )
    return env


@contextlib.contextmanager
def pg_database(label: str) -> Iterator[str]:
    """A fresh empty PostgreSQL database's SQLAlchemy URL; dropped afterwards."""
    name = f"sb_bench_{label}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def app_env(
    database_url: str, provider_url: str, storage_dir: Path, **settings: Any
) -> dict[str, str]:
    """This process's environment minus ``SPEECHBATCH_*``, plus the app's settings.

    ``settings`` take names without the prefix, e.g. ``PROVIDER_CONCURRENCY=8``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
    values: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "SECRET_KEY": "bench-secret",
        "TTS_PROVIDER": "openai",
        "TTS_BASE_URL": provider_url,
        "TTS_API_KEY": "bench-key",
        "TTS_VOICES": "alloy",
        "STORAGE_DIR": str(storage_dir),
        **settings,
    }
    env.update({f"SPEECHBATCH_{k.upper()}": str(v) for k, v in values.items()})
    return env


def cli(env: Mapping[str, str], *args: str) -> str:
    """``flask --app wsgi ARGS`` from the repository root; its stdout (fails loudly)."""
    done = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "wsgi", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"flask {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def bootstrap(env: Mapping[str, str]) -> str:
    """Migrate the database, create the admin of organization "bench"; an API token."""
    cli(env, "db", "upgrade")
    cli(env, "create-admin", "--org", "bench", "--email", ADMIN_EMAIL, "--password", "bench-pw-1")
    # A monthly budget, so that every call is reserved against it as in a billed deployment.
    cli(env, "set-budget", "--org", "bench", "--characters", str(10**9))
    return cli(env, "create-token", "--email", ADMIN_EMAIL).strip().splitlines()[-1]


class FakeProvider:
    """``bench/fake_tts.py`` in a process of its own (loopback, a free port)."""

    def __init__(self, latency: float, audio: str = "fake") -> None:
        script = str(BENCH_DIR / "fake_tts.py")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--latency", f"{latency:g}", "--audio", audio],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    @property
    def url(self) -> str:
        """The base URL the app's OpenAI provider is given."""
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        """Calls so far and the most ever in flight at once."""
        answer = requests.get(f"http://127.0.0.1:{self.port}/stats", timeout=5)
        stats: dict[str, int] = answer.json()
        return stats

    def timeline(self) -> list[tuple[float, float]]:
        """(start, end) of every call since the last reset or timeline (wall clock)."""
        answer = requests.get(f"http://127.0.0.1:{self.port}/timeline", timeout=5)
        return [(float(a), float(b)) for a, b in answer.json()["calls"]]

    def reset(self) -> None:
        """Zero the counters."""
        requests.post(f"http://127.0.0.1:{self.port}/reset", timeout=5)

    def stop(self) -> None:
        """Terminate the process (killed if it does not end within 10 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def fake_provider(latency: float, audio: str = "fake") -> Iterator[FakeProvider]:
    """A running ``FakeProvider`` for the block (``audio="mp3"``: real MP3 answers)."""
    provider = FakeProvider(latency, audio)
    try:
        yield provider
    finally:
        provider.stop()


def exit_on_sigterm() -> None:
    """Make SIGTERM (``timeout``'s) unwind the script, so that its servers are stopped and
    its database dropped: gunicorn runs in a session of its own and would outlive it."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def median(values: Sequence[float]) -> float:
    """The median."""
    return statistics.median(values)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100)."""
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def alternated(
    rounds: int, measure: Callable[[Path | None], float], compare: Path | None, unit: str
) -> dict[str, list[float]]:
    """``measure(None)`` (this tree) and, with ``compare``, ``measure(compare)`` (another
    ``src`` first on ``PYTHONPATH``) for ``rounds`` rounds, in the order A B, B A, ... so
    that a drift of the machine's load falls on both; each round printed. The values of
    each side ("this", "compare")."""
    sides = ["this", "compare"] if compare is not None else ["this"]
    found: dict[str, list[float]] = {side: [] for side in sides}
    for n in range(rounds):
        for side in sides if n % 2 == 0 else sides[::-1]:
            found[side].append(measure(compare if side == "compare" else None))
        values = ", ".join(f"{side} {found[side][-1]:.3f} {unit}" for side in sides)
        print(f"round {n + 1}: {values}", flush=True)
    return found


def alternated_results(
    found: dict[str, list[float]],
    parameters: dict[str, Any],
    name: str,
    at_most: float,
) -> dict[str, Any]:
    """What ``alternated`` rounds give: each side's median, the figure (this tree's median,
    target at most ``at_most``) and, with a compare side, this / compare (printed)."""
    medians = {side: median(values) for side, values in found.items()}
    data: dict[str, Any] = {"parameters": parameters, "rounds": found, "medians": medians}
    value = medians["this"]
    data[name] = figure(name, value, f"<= {at_most}", value <= at_most)
    if "compare" in medians:
        data["this_over_compare"] = value / medians["compare"]
        print(f"medians: this {value:.3f}, compare {medians['compare']:.3f}; "
              f"this / compare {data['this_over_compare']:.4f}")  # fmt: skip
    return data


def figure(name: str, value: float, target: str, ok: bool) -> dict[str, Any]:
    """Print one figure as ``FIGURE name = value (target ...) PASS|MISS``; its record."""
    print(f"FIGURE {name} = {value:.3f} (target {target})  {'PASS' if ok else 'MISS'}", flush=True)
    return {"value": round(value, 4), "target": target, "pass": ok}


def write_results(name: str, data: dict[str, Any]) -> None:
    """Write ``bench/results/NAME.json`` with the machine's description and load."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # Other processes share these machines: the load at the end of the run.
            "loadavg_1_5_15": os.getloadavg(),
        },
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"results written to {path.relative_to(ROOT)}")
