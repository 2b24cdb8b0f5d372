#!/usr/bin/env bash
# The figures of docs/benchmarks.md, one after another; each prints "FIGURE name = ratio
# (target ...) PASS|MISS" and writes bench/results/NAME.json.
# Usage: bench/run_all.sh   (from anywhere; needs PostgreSQL on 127.0.0.1:5432 and wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
for figure in "throughput.py slow" "throughput.py fast" "polling.py" "claim.py" "statements.py" "storage_throughput.py slow" "object_store.py" "worker_latency.py" "webhooks.py" "items_filters.py" "measure_cost.py"; do
    echo "=== bench/$figure ($(date -u +%H:%M:%S), load: $(cut -d' ' -f1-3 /proc/loadavg))"
    # shellcheck disable=SC2086  # the figure's name is its script and its argument
    timeout 900 "$PY" bench/$figure
done
