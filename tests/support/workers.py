"""Running the suite on pytest-xdist workers (``bin/test`` runs three).

The tests that start real processes run in three xdist groups, each one after another
on one worker, as they would in a serial run: the chaos tests (signals, faults, a
PostgreSQL restart; they share the chaos database), the end-to-end tests of crashes and
processes (gunicorn, workers, signals; a database of their own each) and those of pages
(a browser, a client, a fuzzer). The groups usually go to the three workers, which then
take the in-process tests as they come free. Two things cross between the workers:
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
E2E_PAGES_GROUP = "e2e-pages"
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


def _gate() -> Path:
    """The gate in front of LOCK_FILE (see ``postgresql_in_use``)."""
    return LOCK_FILE.with_name(LOCK_FILE.name + ".gate")


@contextlib.contextmanager
def _flocked(path: Path, operation: int) -> Iterator[None]:
    with open(path, "a+b") as file:
        fcntl.flock(file, operation)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextlib.contextmanager
def postgresql_in_use() -> Iterator[None]:
    """Held, shared, by an in-process test while it runs: the server stays up meanwhile.

    A test first passes the gate, which a restart closes as soon as it asks: flock lets a
    new shared lock in while an exclusive one waits, so without the gate the other
    worker's tests, one right after another, kept a restart waiting for minutes."""
    with _flocked(_gate(), fcntl.LOCK_SH):
        pass
    with _flocked(LOCK_FILE, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def postgresql_stopped() -> Iterator[None]:
    """Held, exclusive, by a test that stops the PostgreSQL server: it closes the gate to
    tests that have not started, waits for those that run, and they wait for it."""
    with _flocked(_gate(), fcntl.LOCK_EX), _flocked(LOCK_FILE, fcntl.LOCK_EX):
        yield
