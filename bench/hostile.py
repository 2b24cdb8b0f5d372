"""Hostile input (issue 42): a zip bomb's import, and a ping behind another organization's
hanging receivers.

``gunicorn wsgi:app`` on PostgreSQL, receivers in this process on loopback:

- H1, the bomb: a 1 MB EPUB whose cover image is a 1 GiB entry of zeros, imported through
  ``POST /api/jobs/import`` (one worker, so that its memory is the one measured): the
  seconds to its 422, and the growth of the worker's peak resident memory (VmHWM) across
  the request. Targets: an answer within 10 s, growth under 300 MB.
- H2, the ping: organization A has HANGING deliveries (HANGING / 20 webhooks of 20 pings)
  to a receiver that never answers (each attempt holds a sender until the 10 s deadline);
  once A's attempts are under way, organization B pings its webhook to a fast receiver.
  The figure is the seconds from B's ping to its arrival (2 workers, each with its
  senders). Target: <= 5 s.

Usage: python bench/hostile.py [--hanging 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import requests
from _common import ROOT, app_env, cli, exit_on_sigterm, figure, median, write_results
from _http import Api, deployment
from webhooks import Receiver

sys.path.insert(0, str(ROOT))
from tests.support.epubs import hand_made_epub, package, zeros

NO_PROVIDER = "http://127.0.0.1:9/v1"
TARGET_BOMB_SECONDS = 10.0
TARGET_BOMB_MB = 300.0
TARGET_PING_SECONDS = 5.0
HOOKS_PER_ORGANIZATION = 20


def peak_mb(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def bomb() -> bytes:
    """The 1 MB EPUB with a 1 GiB cover of zeros."""
    return hand_made_epub(
        zeros("OEBPS/cover.png", 1 << 30),
        opf=package(
            b'<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
            b'<item id="cover" href="cover.png" media-type="image/png" properties="cover-image"/>'
        ),
    )


def import_bomb(rounds: int) -> tuple[float, float]:
    """(median seconds to the 422, the worker's peak growth in MB over every round)."""
    upload, seconds = bomb(), []
    with deployment(NO_PROVIDER, workers=1) as d:
        pid = int(re.findall(r"worker ready \(pid: (\d+)\)", d.server.log())[-1])
        before = peak_mb(pid)
        for _ in range(rounds):
            started = time.monotonic()
            answer = requests.post(
                f"{d.api.base_url}/api/jobs/import",
                headers={"Authorization": f"Bearer {d.api.token}"},
                data={"voice": "alloy"},
                files={"file": ("bomb.epub", upload, "application/epub+zip")},
                timeout=120,
            )
            seconds.append(time.monotonic() - started)
            assert answer.status_code == 422, answer.text[:300]
            print(f"H1: 422 in {seconds[-1]:.3f} s: {answer.json()['error']['message']}")
        growth = peak_mb(pid) - before
    return median(seconds), growth


def _organization(env: dict[str, str], slug: str) -> str:
    email = f"admin@{slug}.test"
    cli(env, "create-admin", "--org", slug, "--email", email, "--password", "bench-pw-1")
    return cli(env, "create-token", "--email", email).strip().splitlines()[-1]


def ping_behind_hanging(hanging: int, rounds: int) -> list[float]:
    """Seconds from B's ping to its arrival, once per round, behind A's hanging backlog."""
    stuck, fast = Receiver(hang=True), Receiver()
    arrivals: list[float] = []
    try:
        with deployment(NO_PROVIDER, workers=2) as d, tempfile.TemporaryDirectory() as tmp:
            env = app_env(d.database_url, NO_PROVIDER, Path(tmp))
            slow = Api(d.api.base_url, _organization(env, "slow"))
            other = Api(d.api.base_url, _organization(env, "other"))
            with slow.session() as session:
                for _ in range(HOOKS_PER_ORGANIZATION):
                    body = {"url": stuck.url, "events": ["ping"]}
                    hook = slow.call("POST", "/api/webhooks", body, expect=201)
                    for _ in range(hanging // HOOKS_PER_ORGANIZATION):
                        url = f"{slow.base_url}/api/webhooks/{hook['id']}/ping"
                        session.post(url, timeout=30).raise_for_status()
            time.sleep(2.0)  # A's attempts hold their senders before the timing starts
            hook = other.call("POST", "/api/webhooks", {"url": fast.url, "events": ["ping"]}, 201)
            for n in range(rounds):
                started = time.monotonic()
                sent = other.call("POST", f"/api/webhooks/{hook['id']}/ping", expect=202)
                while sent["event_id"] not in fast.arrivals:
                    if time.monotonic() - started > 120:
                        raise RuntimeError("B's ping never arrived")
                    time.sleep(0.01)
                arrivals.append(fast.arrivals[sent["event_id"]] - started)
                print(f"H2 round {n + 1}: B's ping arrived after {arrivals[-1]:.2f} s")
    finally:
        stuck.stop()
        fast.stop()
    return arrivals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hanging", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    exit_on_sigterm()
    bomb_seconds, bomb_growth = import_bomb(args.rounds)
    arrivals = ping_behind_hanging(args.hanging, args.rounds)
    ping = max(arrivals)
    figures = {
        "bomb_seconds": figure(
            "1 MB zip bomb (1 GiB entry): seconds to its 422", bomb_seconds,
            f"<= {TARGET_BOMB_SECONDS:g}", bomb_seconds <= TARGET_BOMB_SECONDS,
        ),
        "bomb_growth_mb": figure(
            "the same: the worker's peak memory growth, MB", bomb_growth,
            f"< {TARGET_BOMB_MB:g}", bomb_growth < TARGET_BOMB_MB,
        ),
        "ping_seconds": figure(
            f"a ping behind {args.hanging} hanging deliveries of another organization, the "
            "slowest round, seconds", ping, f"<= {TARGET_PING_SECONDS:g}",
            ping <= TARGET_PING_SECONDS,
        ),
    }  # fmt: skip
    write_results(
        "hostile",
        {"params": vars(args), "bomb_seconds": bomb_seconds, "bomb_growth_mb": bomb_growth,
         "arrivals": arrivals, "figures": figures},
    )  # fmt: skip


if __name__ == "__main__":
    main()
