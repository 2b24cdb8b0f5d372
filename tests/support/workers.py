"""Running the suite on pytest-xdist workers (``bin/test`` runs two).

The tests that start real processes run in two xdist groups, each one after another on
one worker, as they would in a serial run: the chaos tests (signals, faults, a
PostgreSQL restart; they share the chaos database) and the end-to-end tests (gunicorn,
workers, a browser; a database of their own each). The two groups usually go to the two
workers, which then take the in-process tests as they come free. Two things cross
between the workers:
- the PostgreSQL server, which one chaos test stops for a moment: every other test
  holds a shared lock on it while it runs and that test takes it exclusively, so neither
  sees the other's half (``postgresql_in_use``, ``postgresql_stopped``);
- the chaos summary: a worker has no terminal of its own, so the table it prints at the
  end travels to the controller in xdist's ``workeroutput``.
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

CHAOS_GROUP = "chaos"
E2E_GROUP = "e2e"
WORKER_SUMMARY = "speechbatch_summary"
SUMMARIES = pytest.StashKey[list[str]]()


def in_process_group(item: pytest.Item, group: str) -> None:
    """Put ``item`` into an xdist group of process tests (``--dist loadgroup``).

    Call it from a ``pytest_collection_modifyitems`` marked ``tryfirst``: xdist's worker
    turns the marker into the "@chaos" (or "@e2e") suffix of the node id in its own hook of that
    name, and hooks run in reverse order of registration, so a conftest registered before
    xdist's worker plugin (a run given paths in its directory) would otherwise add the
    marker too late and the process tests would spread over both workers (seen with -vv:
    no "@chaos" suffix).
    """
    item.add_marker(pytest.mark.xdist_group(group))


def leave_summary(config: pytest.Config, text: str) -> None:
    """Have ``text`` printed at the end of the run (the root conftest prints it): kept in
    the session's stash, or on an xdist worker handed to the controller, which keeps it
    in its own stash when the worker ends."""
    output = getattr(config, "workeroutput", None)
    if output is None:
        config.stash.setdefault(SUMMARIES, []).append(text)
    else:
        output[WORKER_SUMMARY] = output.get(WORKER_SUMMARY, "") + text


class Marked(Protocol):
    """What ``is_chaos_test`` reads of a test item."""

    def iter_markers(self, name: str) -> Iterable[pytest.Mark]: ...


def is_chaos_test(item: Marked) -> bool:
    """Whether ``item`` is one of the chaos tests, which need not hold PostgreSQL up
    (see ``in_process_group``)."""
    return any(
        CHAOS_GROUP in (*mark.args, mark.kwargs.get("name"))
        for mark in item.iter_markers("xdist_group")
    )


# One lock file per machine (not per session): a test that stops the PostgreSQL server
# would break any test of any suite using it meanwhile.
LOCK_FILE = Path(tempfile.gettempdir()) / "speechbatch-tests-postgresql.lock"


@contextlib.contextmanager
def _flocked(operation: int) -> Iterator[None]:
    with open(LOCK_FILE, "a+b") as file:
        fcntl.flock(file, operation)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def postgresql_in_use() -> contextlib.AbstractContextManager[None]:
    """Held, shared, by an in-process test while it runs: the server stays up meanwhile."""
    return _flocked(fcntl.LOCK_SH)


def postgresql_stopped() -> contextlib.AbstractContextManager[None]:
    """Held, exclusive, by a test that stops the PostgreSQL server: it waits for the tests
    of the other workers that use it, and they wait for it."""
    return _flocked(fcntl.LOCK_EX)
