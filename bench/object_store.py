"""Object storage: boto3 (the adapter's S3Storage) against obstore, on SeaweedFS.

Two figures each, on a SeaweedFS (``weed server -s3``, the tests' helper) of its own:
- item writes: ITEMS PUTs of an item's audio (40 kB, about 2.5 s of 128 kbit/s MP3) from
  8 threads (an item's audio is written by the runner's threads, several at once):
  PUTs per second and the p50/p99 of one PUT;
- a 500 MB render or export: seconds, and the peak memory of the process above what it
  held idle just before (VmHWM after resetting it through /proc/self/clear_refs), each
  library in a fresh child process; target: at most 100 MB above idle.
The folder's write_file is measured the same way for reference.

Usage: python bench/object_store.py [--items 400] [--size-mb 500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import ROOT, exit_on_sigterm, figure, median, percentile, write_results

sys.path.insert(0, str(ROOT))
from tests.support.seaweed import SeaweedServer

THREADS = 8
ITEM_BYTES = 40_000

# A child: build one library's client, warm it with a small write, reset the peak, upload
# the file, print {"idle_mb", "peak_mb", "seconds"}.
_UPLOAD_CHILD = r"""
import json, sys, time
from pathlib import Path
lib, bucket, source = sys.argv[1], sys.argv[2], Path(sys.argv[3])

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
if lib == "boto3":
    from speechbatch.adapters.object_storage import S3Storage
    store = S3Storage(bucket, "bench/")
    store.write("warm", b"x")
    upload = lambda: store.write_file("big.zip", source)
elif lib == "obstore":
    import os, obstore
    from obstore.store import S3Store
    store = S3Store(bucket, endpoint=os.environ["AWS_ENDPOINT_URL"],
                    client_options={"allow_http": True})
    obstore.put(store, "bench/warm", b"x")
    upload = lambda: obstore.put(store, "bench/big.zip", source, chunk_size=8 * 1024 * 1024,
                                 max_concurrency=4)
else:
    from speechbatch.adapters.storage import LocalStorage
    store = LocalStorage(bucket)
    store.write("warm", b"x")
    upload = lambda: store.write_file("big.zip", source)
idle = rss("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM (the peak resident set) to the current size
began = time.monotonic()
upload()
seconds = time.monotonic() - began
print(json.dumps({"idle_mb": idle, "peak_mb": rss("VmHWM:"), "seconds": seconds}))
"""


def item_writes(lib: str, server: SeaweedServer, items: int) -> dict[str, Any]:
    """ITEMS PUTs of ITEM_BYTES from THREADS threads: rate and per-PUT latencies."""
    bucket = server.new_bucket()
    payload = os.urandom(ITEM_BYTES)
    if lib == "boto3":
        from speechbatch.adapters.object_storage import S3Storage

        s3 = S3Storage(bucket, "bench/")

        def put(key: str) -> None:
            s3.write(key, payload)
    else:
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=server.endpoint, client_options={"allow_http": True})

        def put(key: str) -> None:
            obstore.put(store, f"bench/{key}", payload)

    put("warm")
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(items))

    def worker() -> None:
        for n in counter:
            began = time.monotonic()
            put(f"jobs/{n % 50}/{n}-a1.mp3")
            with lock:
                latencies.append(time.monotonic() - began)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    return {
        "puts_per_second": items / seconds,
        "p50_ms": median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


def big_upload(lib: str, target: str, source: Path, env: dict[str, str]) -> dict[str, Any]:
    """One child process uploading ``source``; its memory and time."""
    done = subprocess.run(
        [sys.executable, "-c", _UPLOAD_CHILD, lib, target, str(source)],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["above_idle_mb"] = result["peak_mb"] - result["idle_mb"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--size-mb", type=int, default=500)
    args = parser.parse_args()
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="sb_bench_s3_") as tmp:
        server = SeaweedServer(Path(tmp) / "weed").start()
        try:
            os.environ.update(server.env())
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            writes: dict[str, dict[str, Any]] = {}
            for lib in ("boto3", "obstore", "boto3", "obstore"):  # interleaved, best of two
                got = item_writes(lib, server, args.items)
                if lib not in writes or got["puts_per_second"] > writes[lib]["puts_per_second"]:
                    writes[lib] = got
            for lib, got in writes.items():
                print(
                    f"item writes {lib}: {got['puts_per_second']:.0f} PUT/s, "
                    f"p50 {got['p50_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms",
                    flush=True,
                )
            source = Path(tmp) / "render.bin"
            with source.open("wb") as f:
                for _ in range(args.size_mb):
                    f.write(os.urandom(1024 * 1024))
            uploads: dict[str, dict[str, Any]] = {}
            for lib in ("boto3", "obstore", "folder"):
                target = str(Path(tmp) / "folder") if lib == "folder" else server.new_bucket()
                uploads[lib] = big_upload(lib, target, source, env)
                got = uploads[lib]
                print(
                    f"{args.size_mb} MB upload {lib}: {got['seconds']:.2f} s, "
                    f"{got['above_idle_mb']:.1f} MB above idle "
                    f"(idle {got['idle_mb']:.0f} MB, peak {got['peak_mb']:.0f} MB)",
                    flush=True,
                )
        finally:
            server.stop()
    memory = uploads["boto3"]["above_idle_mb"]
    record = figure(
        f"upload of a {args.size_mb} MB file (boto3, the adapter): MB above idle",
        memory,
        "<= 100",
        memory <= 100,
    )
    write_results("object_store", {"item_writes": writes, "uploads": uploads, "memory": record})


if __name__ == "__main__":
    main()
