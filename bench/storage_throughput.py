"""Provider-bound throughput with the audio in a bucket: ``throughput.py``'s figure run on
the folder and on SeaweedFS (``SPEECHBATCH_STORAGE_URL=s3://…``) in the same run, one
after the other (PAIRS times, alternating), and the ratio of their medians.

Target: efficiency on SeaweedFS / efficiency on the folder >= 0.93.

Usage: python bench/storage_throughput.py [slow|fast] [--pairs 1] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import ROOT, exit_on_sigterm, figure, median, write_results
from throughput import FIGURES, SLOTS, measure

sys.path.insert(0, str(ROOT))
from tests.support.seaweed import SeaweedServer

TARGET = 0.93


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", nargs="?", default="slow", choices=FIGURES)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    exit_on_sigterm()
    jobs, items, latency, rounds, _ = FIGURES[args.figure]
    rounds = args.rounds or rounds
    params = {
        "jobs": jobs,
        "items": items,
        "latency": latency,
        "slots": SLOTS,
        "workers": 2,
        "item_concurrency": 4,
        "poll_hz": 5.0,
        "ideal_seconds": jobs * items * latency / min(SLOTS, jobs * 4),
    }
    efficiency: dict[str, list[float]] = {"folder": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="sb_bench_weed_") as tmp:
        server = SeaweedServer(Path(tmp) / "weed").start()
        try:
            os.environ.update(server.env())  # the app processes inherit the AWS variables
            for pair in range(args.pairs):
                for kind in ("folder", "s3"):
                    storage = None
                    if kind == "s3":
                        storage = {"STORAGE_URL": f"s3://{server.new_bucket()}/bench"}
                    print(f"pair {pair + 1}: {kind}", flush=True)
                    results, _ = measure(params, rounds, storage)
                    efficiency[kind] += [r["efficiency"] for r in results]
        finally:
            server.stop()
    folder, s3 = median(efficiency["folder"]), median(efficiency["s3"])
    print(f"efficiency: folder {folder:.3f}, SeaweedFS {s3:.3f}")
    record = figure(
        f"throughput {args.figure} on SeaweedFS / on the folder (medians)",
        s3 / folder,
        f">= {TARGET}",
        s3 / folder >= TARGET,
    )
    write_results(
        f"storage_throughput_{args.figure}",
        {"params": params, "efficiency": efficiency, "ratio": record},
    )


if __name__ == "__main__":
    main()
