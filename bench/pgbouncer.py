"""What PgBouncer in transaction mode costs on the figures users feel, A/B in one run.

Two deployments side by side (``_ab.py``), the same code: A reaches PostgreSQL directly;
B through a PgBouncer started here (Debian's ``pgbouncer``, the README's settings, and
PgBouncer's own default of 20 server connections a database), with
``SPEECHBATCH_LISTEN_DATABASE_URL`` pointing straight at PostgreSQL as the README advises.
Behind the pooler nothing is prepared, each transaction sets its time limits (one round
trip more) and a poll's one-statement read is a read-only transaction.

- Figures 1 and 2 of ``throughput.py``, rounds alternating A, B, B, A, ...
- The polls of ``polling.py`` (the full read of a 50-item job, the summary and a 304 of a
  5,000-item job; ``wrk -t2 -c8``), sides alternating.

Figures: B / A for each (the part of A's rate or efficiency kept behind the pooler).

Usage: python bench/pgbouncer.py [--rounds 4] [--poll-rounds 3] [--duration 5]
       [--figures slow fast polls]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _ab import Side
from _common import PG_ADMIN_DSN, ROOT, exit_on_sigterm, write_results
from prepared import measure, parse_args

sys.path.insert(0, str(ROOT))
from tests.support.pgbouncer import PgBouncer  # (after the root is on the path)

DEFAULT_POOL_SIZE = 20  # PgBouncer's own default_pool_size


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="sb_bench_pgbouncer_") as folder:
        server = PG_ADMIN_DSN.replace("postgresql://", "postgresql+psycopg://", 1)
        bouncer = PgBouncer(Path(folder), server, DEFAULT_POOL_SIZE).start()
        try:
            sides: dict[str, Side] = {
                "direct": {},
                "pgbouncer": {
                    "connect": lambda url: {
                        "DATABASE_URL": bouncer.url(url),
                        "LISTEN_DATABASE_URL": url,
                    }
                },
            }
            write_results("pgbouncer", measure(sides, args))
        finally:
            bouncer.stop()


if __name__ == "__main__":
    main()
