"""Run the real app as real processes, through its external contract only.

Nothing here imports ``speechbatch``: the app is reached through environment variables,
``flask --app wsgi ...``, ``gunicorn wsgi:app`` and the JSON API, exactly as an operator
or another service would.

Typical use (see tests/e2e/conftest.py for the fixtures built on these)::

    url = make_pg_database()                       # or sqlite_url(tmp_path)
    env = app_env(url, fake.url, tmp_path / "audio")
    token = bootstrap(env)                         # db upgrade, create-admin, create-token
    server = GunicornServer(env, tmp_path, workers=2).start()
    api = ApiClient(server.base_url, token)
    ...
    server.stop()
    drop_pg_database(url)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

import psycopg
import requests

from tests.support.processes import REPO_ROOT, LoggedProcess

T = TypeVar("T")

# The quick start's lines that people and tests read the demo admin and token from.
SIGN_IN_LINE = re.compile(r"^\s*sign in\s*:\s*(\S+)\s*/\s*(\S+)\s*$", re.MULTILINE)
API_TOKEN_LINE = re.compile(r"^\s*API token\s*:\s*(\S+)\s*$", re.MULTILINE)
# What gunicorn.conf.py's post_worker_init logs once a worker has loaded the app.
READY_LINE = re.compile(r"speechbatch worker ready \(pid: (\d+)\)")
VENV_BIN = REPO_ROOT / ".venv" / "bin"
PG_ADMIN_DSN = os.environ.get(
    "SPEECHBATCH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)

# Timing knobs given to the app under test. A lease must be longer than one item's worst
# case: MAX_ATTEMPTS x TIMEOUT + (MAX_ATTEMPTS - 1) x TIMEOUT = 2 x 2 + 1 x 2 = 6 s.
WORKER_DEAD_SECONDS = 3.0
LEASE_SECONDS = 30.0
TTS_TIMEOUT_SECONDS = 2.0
TTS_MAX_ATTEMPTS = 2
ITEM_CONCURRENCY = 2
GRACEFUL_TIMEOUT = 10.0

# The pause point of tests/support/pause_point.py (a WSGI entry for gunicorn): an item whose
# text contains PAUSE_MARKER waits before its provider call, writing PAUSED_FILE into the
# directory named by PAUSE_DIR_VARIABLE, until RELEASE_FILE appears there.
PAUSE_POINT_APP = "tests.support.pause_point:app"
PAUSE_DIR_VARIABLE = "PAUSE_POINT_DIR"
PAUSE_MARKER = "[pause-point]"
PAUSED_FILE = "paused"
RELEASE_FILE = "release"

# A provider address nothing listens on, for servers whose provider is never called.
UNREACHABLE_PROVIDER = "http://127.0.0.1:9/v1"
ADMIN_ORG = "acme"
ADMIN_EMAIL = "a@example.com"
ADMIN_PASSWORD = "pw-123456"


# --------------------------------------------------------------------------------------------
# Databases
# --------------------------------------------------------------------------------------------
def _pg_admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3)


def pg_unreachable_reason() -> str | None:
    """None when the PostgreSQL admin database answers, else why not."""
    try:
        with _pg_admin() as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL unreachable at {PG_ADMIN_DSN}: {exc}"
    return None


def _pg_url_base() -> str:
    base = PG_ADMIN_DSN.rsplit("/", 1)[0]
    return base.replace("postgresql://", "postgresql+psycopg://", 1)


def pg_database_name(url: str) -> str:
    """The database name of a PostgreSQL URL."""
    return url.rsplit("/", 1)[1]


def make_pg_database(prefix: str = "sb_e2e", template: str | None = None) -> str:
    """CREATE a fresh database (empty, or a copy of database ``template``); return its
    SQLAlchemy URL (postgresql+psycopg://...)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"{clause}')
    return f"{_pg_url_base()}/{name}"


def drop_pg_database(url: str) -> None:
    """DROP the database of ``url``, disconnecting whoever is still connected."""
    name = pg_database_name(url)
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SQLITE_FILE = "speechbatch.db"


def sqlite_url(directory: Path) -> str:
    """The URL of a SQLite file in ``directory`` (the app creates the file)."""
    return f"sqlite:///{(directory / SQLITE_FILE).resolve()}"


def copy_sqlite_database(source_dir: Path, target_dir: Path) -> str:
    """Copy the (closed) SQLite database of ``source_dir`` into ``target_dir``; its URL."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        source = source_dir / (SQLITE_FILE + suffix)
        if source.exists():
            shutil.copyfile(source, target_dir / (SQLITE_FILE + suffix))
    return sqlite_url(target_dir)


# --------------------------------------------------------------------------------------------
# Environment and command line
# --------------------------------------------------------------------------------------------
def app_env(
    database_url: str,
    provider_url: str,
    storage_dir: Path,
    **overrides: str | float | int,
) -> dict[str, str]:
    """The environment of an app process: this one's, minus SPEECHBATCH_*, plus the test's.

    ``overrides`` take variable names without the prefix, e.g. ``ITEM_CONCURRENCY=4``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
    env.update(
        {
            "SPEECHBATCH_DATABASE_URL": database_url,
            "SPEECHBATCH_SECRET_KEY": "e2e-secret-key",
            "SPEECHBATCH_TTS_PROVIDER": "openai",
            "SPEECHBATCH_TTS_BASE_URL": provider_url,
            "SPEECHBATCH_TTS_API_KEY": "test-key",
            "SPEECHBATCH_TTS_VOICES": "alloy",
            "SPEECHBATCH_STORAGE_DIR": str(storage_dir),
            "SPEECHBATCH_WORKER_DEAD_SECONDS": f"{WORKER_DEAD_SECONDS:g}",
            "SPEECHBATCH_LEASE_SECONDS": f"{LEASE_SECONDS:g}",
            "SPEECHBATCH_TTS_TIMEOUT_SECONDS": f"{TTS_TIMEOUT_SECONDS:g}",
            "SPEECHBATCH_TTS_MAX_ATTEMPTS": str(TTS_MAX_ATTEMPTS),
            "SPEECHBATCH_ITEM_CONCURRENCY": str(ITEM_CONCURRENCY),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name, value in overrides.items():
        env["SPEECHBATCH_" + name.upper()] = value if isinstance(value, str) else f"{value:g}"
    return env


def cli(env: Mapping[str, str], *args: str, timeout: float = 60.0) -> str:
    """Run ``flask --app wsgi ARGS`` from the repository root; return stdout, fail loudly."""
    command = [str(VENV_BIN / "flask"), "--app", "wsgi", *args]
    result = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(command[1:])} exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
        )
    return result.stdout


# SQLite databases this test process bootstrapped through the CLI, kept aside: (org,
# email, password) -> (folder of the copy, API token).
_SQLITE_BOOTSTRAPS: dict[tuple[str, str, str], tuple[Path, str]] = {}


def bootstrap(
    env: Mapping[str, str],
    org: str = ADMIN_ORG,
    email: str = ADMIN_EMAIL,
    password: str = ADMIN_PASSWORD,
) -> str:
    """Migrate, create an admin, and return a fresh API token for it.

    A new SQLite database (``sqlite_url``'s file, not there yet) is bootstrapped by the
    CLI once per test process and copied after: each of the three CLI runs loads the app,
    and the copy is the same database (its token valid in every copy).
    """
    url = env["SPEECHBATCH_DATABASE_URL"]
    target = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    fresh_sqlite = target is not None and target.name == SQLITE_FILE and not target.exists()
    key = (org, email, password)
    if fresh_sqlite and target is not None and key in _SQLITE_BOOTSTRAPS:
        kept, token = _SQLITE_BOOTSTRAPS[key]
        copy_sqlite_database(kept, target.parent)
        return token
    cli(env, "db", "upgrade")
    cli(env, "create-admin", "--org", org, "--email", email, "--password", password)
    out = cli(env, "create-token", "--email", email)
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines:
        raise AssertionError("create-token printed nothing")
    if fresh_sqlite and target is not None:
        # The CLI runs have exited: the file is closed and whole.
        kept = Path(tempfile.mkdtemp(prefix="speechbatch-bootstrap-"))
        atexit.register(shutil.rmtree, kept, True)
        copy_sqlite_database(target.parent, kept)
        _SQLITE_BOOTSTRAPS[key] = (kept, lines[-1])
    return lines[-1]


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process from /proc, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def pid_stopped(pid: int) -> bool:
    """Whether ``pid`` exists and is stopped by a signal (SIGSTOP has taken effect)."""
    stat = _stat(pid)
    return stat is not None and stat[0] == "T"


def threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped by a signal (a group stop is per thread)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True  # gone: it runs nothing
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:
            continue
        if raw[raw.rfind(")") + 2 :].split()[0] not in ("T", "t"):
            return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def child_pids(pid: int) -> list[int]:
    """Live (non-zombie) children of ``pid``, read from /proc."""
    children: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                children.update(int(c) for c in (task / "children").read_text().split())
    except (FileNotFoundError, ProcessLookupError):
        return []
    if not children and not Path(f"/proc/{pid}/task/{pid}/children").exists():
        # Kernel without CONFIG_PROC_CHILDREN: scan every process's parent.
        children = {p for p in _all_pids() if (s := _stat(p)) is not None and s[1] == pid}
    return sorted(c for c in children if pid_alive(c))


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for p in _all_pids():
        stat = _stat(p)
        if stat is not None and stat[2] == pgid and stat[0] not in ("Z", "X"):
            found.append(p)
    return sorted(found)


def wait_until(
    check: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``check`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not met within {timeout:g} s (last: {value!r})")
        time.sleep(interval)


def _sqlite_write_lock_free(path: str) -> bool:
    """Whether SQLite's write lock can be taken within 0.2 s (a live writer ends by then)."""
    connection = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


class GunicornServer(LoggedProcess):
    """``gunicorn wsgi:app`` from the repository root, in its own process group.

    ``start()`` waits for ``GET /healthz`` == 200 and for every worker to be forked.
    ``timeout`` is gunicorn's worker timeout; it is long by default so that a SIGSTOPped
    and then SIGCONTed group is not murdered by its own master on resume. ``app`` is the
    WSGI entry (tests.support.pause_point:app adds a pause point for tests).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        workers: int = 2,
        threads: int = 4,
        port: int | None = None,
        name: str = "gunicorn",
        graceful_timeout: float = GRACEFUL_TIMEOUT,
        timeout: float = 120.0,
        extra_args: tuple[str, ...] = (),
        app: str = "wsgi:app",
    ) -> None:
        port = port or free_port()
        super().__init__(env, log_dir / f"{name}-{port}.log", name)
        self.app = app
        self.workers = workers
        self.threads = threads
        self.port = port
        self.graceful_timeout = graceful_timeout
        self.timeout = timeout
        self.extra_args = extra_args

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The gunicorn command line."""
        return [
            str(VENV_BIN / "gunicorn"),
            self.app,
            "-w",
            str(self.workers),
            "--threads",
            str(self.threads),
            "-b",
            f"127.0.0.1:{self.port}",
            "--graceful-timeout",
            f"{self.graceful_timeout:g}",
            "--timeout",
            f"{self.timeout:g}",
            *self.extra_args,
        ]

    def start(self, timeout: float = 30.0) -> GunicornServer:
        """Spawn the server and wait until it is healthy with all workers forked."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is already running")
        self.spawn(self.command())
        try:
            self.wait_healthy(timeout)
            # Every worker ready, not only forked: healthz answered from the first one up,
            # and a test that needs both workers to answer must not start while the
            # second still loads the app.
            wait_until(
                lambda: len(self.ready_workers()) >= self.workers,
                timeout,
                what=f"{self.name}: {self.workers} workers ready",
            )
        except BaseException:
            log = self.log_text()
            self.stop(graceful=False)
            raise AssertionError(f"{self.name} did not start; its log:\n{log}") from None
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait for ``GET /healthz`` == 200; fail at once if the master exits."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise AssertionError(f"{self.name} exited with {code} before it was healthy")
            try:
                response = requests.get(f"{self.base_url}/healthz", timeout=2)
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text[:200]}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.name} not healthy within {timeout:g} s ({last})")
            time.sleep(0.1)

    def stop(self, *, graceful: bool = True, timeout: float | None = None) -> int | None:
        """Stop the server; SIGKILL the whole group if a graceful stop does not finish.

        Always leaves no process of the group behind (a frozen group is killed too).
        """
        if self.proc is None:
            return None
        try:
            if graceful and self.proc.poll() is None:
                self.signal_group(signal.SIGCONT)
                self.kill(signal.SIGTERM)
                limit = self.graceful_timeout + 5.0 if timeout is None else timeout
                self.wait_exit(limit)
            self.signal_group(signal.SIGKILL)
            self.proc.wait(10)
            wait_until(
                lambda: not group_pids(self.pid),
                10.0,
                what=f"{self.name}: process group gone",
            )
        finally:
            self._close_log()
        return self.proc.returncode

    def __enter__(self) -> GunicornServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(graceful=False)

    # -- processes and signals ----------------------------------------------------------------
    def ready_workers(self, pids: list[int] | None = None) -> set[int]:
        """The live workers (or those of ``pids``) that have said they are ready
        (gunicorn.conf.py's post_worker_init logs it once the app is loaded)."""
        said = {int(pid) for pid in READY_LINE.findall(self.log_text(2_000_000))}
        return said & set(self.worker_pids() if pids is None else pids)

    def worker_pids(self) -> list[int]:
        """The live worker processes (children of the master)."""
        if self.proc is None:
            return []
        return child_pids(self.proc.pid)

    def wait_for_workers(self, exclude: set[int] | None = None, timeout: float = 20.0) -> list[int]:
        """Wait until ``workers`` live workers are ready (as in ``start``), none of them
        in ``exclude``: a respawned worker is forked long before it has loaded the app."""
        old = exclude or set()

        def fresh() -> list[int]:
            # One look at the processes: the ready ones are among the live ones, none old.
            pids = self.worker_pids()
            if old & set(pids) or len(self.ready_workers(pids)) < self.workers:
                return []
            return pids

        return wait_until(fresh, timeout, what=f"{self.name}: fresh workers")

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the master and every worker (the whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def freeze(self, tries: int = 50) -> int:
        """SIGSTOP the whole server, outside a write transaction on SQLite; return the tries.

        SQLite has one write lock for the whole database and nothing like PostgreSQL's
        idle_in_transaction_session_timeout: a process frozen inside a write transaction
        holds it until it wakes or dies, and no other process can write (nor recover the
        frozen run) meanwhile. That is SQLite's limit, not a window in the app, so on SQLite
        a freeze that lands inside a write is undone and tried again a moment later.
        """
        url = self.env.get("SPEECHBATCH_DATABASE_URL", "")
        for attempt in range(1, tries + 1):
            self.signal_group(signal.SIGSTOP)
            # The signal takes effect when each thread is next scheduled: probe only once
            # every thread of the group has stopped, or a thread that was still running
            # could take the write lock right after a probe that found it free.
            wait_until(
                lambda: all(threads_stopped(p) for p in group_pids(self.pid)),
                5,
                interval=0.002,
                what=f"{self.name} frozen",
            )
            if not url.startswith("sqlite:///") or _sqlite_write_lock_free(
                url.removeprefix("sqlite:///")
            ):
                return attempt
            self.signal_group(signal.SIGCONT)
            time.sleep(0.005 + 0.02 * (attempt % 3))
        raise AssertionError(f"{self.name}: every freeze landed inside a SQLite write")

    def kill_worker(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one worker (it must be a child of this server's master)."""
        if pid not in self.worker_pids():
            raise AssertionError(f"{pid} is not a live worker of {self.name}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def kill_workers(self, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every worker (the master stays); returns their PIDs."""
        pids = self.worker_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids


@contextlib.contextmanager
def page_server(
    directory: Path, name: str, **env: str | float | int
) -> Iterator[tuple[GunicornServer, str]]:
    """gunicorn wsgi:app (one worker) on a new SQLite database in ``directory``, for a
    page's browser test: the server and its admin's API token. Its OpenAI-style provider
    is unreachable; ``env`` adds settings (``TTS_PROVIDER="espeak"`` for audio)."""
    settings = app_env(sqlite_url(directory), UNREACHABLE_PROVIDER, directory / "audio", **env)
    token = bootstrap(settings)
    with GunicornServer(settings, directory, workers=1, threads=4, name=name) as app:
        yield app, token


# --------------------------------------------------------------------------------------------
# JSON API client
# --------------------------------------------------------------------------------------------
Job = dict[str, Any]

BILLING_FIELDS = ("billed_characters", "provider_calls")


def runs_changed_by_zombie(after: list[Job], before: list[Job]) -> list[Any]:
    """What a thawed zombie changed in the run history, apart from its one allowed write.

    A run declared dead may still give back the reservation of a call it never sent (its
    billed characters and calls only go down: the ledger must equal what the provider
    received); anything else that differs is returned, as (before, after) pairs.
    """
    if len(after) != len(before):
        return [(before, after)]
    changed: list[Any] = []
    for now, was in zip(after, before, strict=True):
        rest_now = {k: v for k, v in now.items() if k not in BILLING_FIELDS}
        rest_was = {k: v for k, v in was.items() if k not in BILLING_FIELDS}
        if rest_now != rest_was or any(now[k] > was[k] for k in BILLING_FIELDS if k in was):
            changed.append((was, now))
    return changed


class ApiClient:
    """A tiny bearer-token client of the JSON API (one connection per call: thread-safe)."""

    def __init__(self, base_url: str, token: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def on(self, base_url: str) -> ApiClient:
        """The same client against another server."""
        return ApiClient(base_url, self.token, self.timeout)

    def request(self, method: str, path: str, json: Any = None) -> requests.Response:
        """One authenticated call; ``path`` is root-relative (``/api/...``)."""
        return requests.request(
            method,
            self.base_url + path,
            json=json,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=self.timeout,
        )

    @staticmethod
    def _expect(response: requests.Response, status: int) -> Job:
        if response.status_code != status:
            raise AssertionError(
                f"{response.request.method} {response.url}: expected {status}, got "
                f"{response.status_code}: {response.text[:2000]}"
            )
        result: Job = response.json()
        return result

    def create_job(self, items: list[str], title: str = "e2e job", voice: str = "alloy") -> Job:
        """POST /api/jobs; returns the created job (asserts 201)."""
        body = {"title": title, "voice": voice, "items": items}
        return self._expect(self.request("POST", "/api/jobs", body), 201)

    def generate(self, job_id: int) -> requests.Response:
        """POST /api/jobs/ID/generate (the caller checks 202 or 409)."""
        return self.request("POST", f"/api/jobs/{job_id}/generate")

    def regenerate(self, job_id: int) -> requests.Response:
        """POST /api/jobs/ID/regenerate."""
        return self.request("POST", f"/api/jobs/{job_id}/regenerate")

    def get_job(self, job_id: int) -> Job:
        """GET /api/jobs/ID (asserts 200)."""
        return self._expect(self.request("GET", f"/api/jobs/{job_id}"), 200)

    def audio(self, audio_url: str) -> requests.Response:
        """GET an item's ``audio_url`` (root-relative)."""
        return self.request("GET", audio_url)

    def wait_for(self, predicate: Callable[[], T], timeout: float, interval: float = 0.05) -> T:
        """Poll ``predicate`` until truthy; connection errors count as "not yet"."""

        def attempt() -> T | None:
            try:
                return predicate()
            except requests.RequestException:
                return None

        return cast(T, wait_until(attempt, timeout, interval, what="ApiClient.wait_for"))

    def wait_job(
        self,
        job_id: int,
        predicate: Callable[[Job], bool],
        timeout: float,
        interval: float = 0.05,
        what: str = "job condition",
    ) -> Job:
        """Poll GET /api/jobs/ID until ``predicate(job)``; errors and non-200s are retried."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                response = self.request("GET", f"/api/jobs/{job_id}")
                if response.status_code == 200:
                    job: Job = response.json()
                    if predicate(job):
                        return job
                    last = {k: job.get(k) for k in ("status", "attempt", "progress")}
                else:
                    last = f"{response.status_code} {response.text[:300]}"
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise AssertionError(f"job {job_id}: {what} not met within {timeout:g} s: {last}")
            time.sleep(interval)
