#!/usr/bin/env bash
# Run every benchmark in turn; each prints its table and writes bench/results/NAME.json.
# Usage: bench/run_all.sh   (from anywhere; needs PostgreSQL on 127.0.0.1:5432 and wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
for name in claim batch polling flat watched recovery statements reuse slots generate; do
    echo "=== bench/$name.py ($(date +%H:%M:%S), load: $(cut -d' ' -f1-3 /proc/loadavg))"
    timeout 900 "$PY" "bench/$name.py"
done
