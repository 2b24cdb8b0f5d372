"""A TCP proxy in front of PostgreSQL whose faults the test controls (loopback only).

The app is pointed at the proxy (``proxy.url(database_url)``) and the test injects the
faults a network or a failover causes, at the moment it chooses:

- ``black_hole(seconds)``: nothing is forwarded for ``seconds`` (``refuse=True``: the
  connections are reset at once and new ones refused, as a stopped server; otherwise they
  stall, as a partition, and are reset when it ends, as after a failover);
- ``reset_all()``: every connection is reset now, mid-transaction or not;
- ``drop_after_commit(n)``: the next ``n`` COMMITs reach the server, which runs them, and
  the client's connection is reset before the answer reaches it: a lost acknowledgement
  (the transaction happened; the client saw an error). ``touching=b"INSERT INTO x"``
  counts only the COMMITs of transactions that ran such a statement (a chosen unit of
  work's), and ``then_hole=seconds`` starts a refusing black hole as the last one is lost;
- ``refuse_touching(seconds, b"UPDATE x")``: for ``seconds``, a connection that sends a
  query containing those bytes is reset before the server gets it (its transaction rolls
  back): one kind of unit of work fails again and again while every other query, the
  processes' heartbeats included, goes through.

COMMIT is recognised in the frontend protocol's simple Query ('Q') and, for prepared or
extended-protocol statements, from the Parse ('P') that names it to the Execute ('E') that
runs it. The proxy answers SSL and GSS encryption
requests with 'N' itself, so the stream it reads is always plain.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass

SSL_REQUEST = 80877103
GSS_REQUEST = 80877104
COMMIT = re.compile(rb"^\s*(COMMIT|END)\s*;?\s*$", re.IGNORECASE)
# A transaction's edges that are not a COMMIT: what ran before is not the next one's.
EDGE = re.compile(rb"^\s*(BEGIN|START TRANSACTION|ROLLBACK|ABORT)\b", re.IGNORECASE)
POLL = 0.05


@dataclass
class ProxyStats:
    """What the proxy saw and did."""

    connections: int = 0
    commits: int = 0
    acks_dropped: int = 0
    resets: int = 0


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped connection looks to its peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Frames:
    """Splits a byte stream into protocol messages (type byte, int32 length, payload)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= 5:
            (length,) = struct.unpack("!i", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                break
            messages.append((self._buffer[:1], self._buffer[5 : 1 + length]))
            self._buffer = self._buffer[1 + length :]
        return messages


class CommitSpotter:
    """Says which frontend messages run a COMMIT: a simple Query ('Q') of one, or the
    Execute ('E') of a portal bound ('B') to a statement that a Parse ('P') made of one
    (psycopg's prepared statements; the unnamed statement of the extended protocol)."""

    def __init__(self) -> None:
        self._commit_statements: set[bytes] = set()
        self._bound_commit = False
        self._queries: dict[bytes, bytes] = {}  # prepared statement name -> its query
        self._running: list[bytes] = []  # the queries of the transaction going on
        self.committed: list[bytes] = []  # the queries of the transaction just committed

    def runs_commit(self, kind: bytes, payload: bytes) -> bool:
        """Whether this message makes the server run a COMMIT (``committed`` then holds
        that transaction's queries)."""
        if kind == b"Q":
            query = payload.split(b"\0", 1)[0]
            if COMMIT.match(query) is not None:
                return self._commits()
            self._note(query)
        if kind == b"P":
            name, query = payload.split(b"\0", 2)[:2]
            self._queries[name] = query
            if COMMIT.match(query):
                self._commit_statements.add(name)
            else:
                self._commit_statements.discard(name)
        elif kind == b"B":
            statement = payload.split(b"\0", 2)[1]
            self._bound_commit = statement in self._commit_statements
            if not self._bound_commit:
                self._note(self._queries.get(statement, b""))
        elif kind == b"E" and self._bound_commit:
            self._bound_commit = False
            return self._commits()
        return False

    def query_of(self, kind: bytes, payload: bytes) -> bytes:
        """The query text a message runs or prepares (b"" for other messages)."""
        if kind == b"Q":
            return payload.split(b"\0", 1)[0]
        if kind == b"P":
            return payload.split(b"\0", 2)[1]
        if kind == b"B":
            return self._queries.get(payload.split(b"\0", 2)[1], b"")
        return b""

    def _note(self, query: bytes) -> None:
        if EDGE.match(query):
            self._running = []
        else:
            self._running.append(query)

    def _commits(self) -> bool:
        self.committed, self._running = self._running, []
        return True


class _Link(threading.Thread):
    """One client connection and its server connection, pumped by one thread."""

    def __init__(self, proxy: PgProxy, client: socket.socket) -> None:
        super().__init__(name="pg-proxy-link", daemon=True)
        self.proxy = proxy
        self.client = client
        self.server: socket.socket | None = None
        self.killed = threading.Event()
        self.stalled = False  # a black hole held this link: it is reset when the hole ends
        self._drop_pending = False

    def kill(self) -> None:
        """Reset both sides (from any thread); the pump ends at its next turn."""
        self.killed.set()
        _reset(self.client)
        if self.server is not None:
            _reset(self.server)

    def run(self) -> None:
        try:
            startup = self._negotiate()
            if startup is None or not self._wait_out_hole():
                return
            self.server = socket.create_connection(self.proxy.upstream, timeout=5)
            self.server.settimeout(None)
            self.server.sendall(startup)
            self._pump()
        except OSError:
            pass
        finally:
            self.kill()
            self.proxy.forget(self)

    def _read_exact(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            if self.killed.is_set():
                return None
            ready, _, _ = select.select([self.client], [], [], POLL)
            if ready:
                chunk = self.client.recv(n - len(data))
                if not chunk:
                    return None
                data += chunk
        return data

    def _negotiate(self) -> bytes | None:
        """Read the startup message, answering encryption requests with 'N' ourselves."""
        while True:
            head = self._read_exact(8)
            if head is None:
                return None
            length, code = struct.unpack("!ii", head)
            if code in (SSL_REQUEST, GSS_REQUEST) and length == 8:
                self.client.sendall(b"N")
                continue
            rest = self._read_exact(length - 8)
            return None if rest is None else head + rest

    def _wait_out_hole(self) -> bool:
        while self.proxy.holed():  # not connected yet: it goes on once the hole ends
            if self.killed.wait(POLL):
                return False
        return not self.killed.is_set()

    def _pump(self) -> None:
        assert self.server is not None
        client_frames, server_frames = _Frames(), _Frames()
        commits = CommitSpotter()
        while not self.killed.is_set():
            if self.proxy.holed():  # forward nothing: the bytes wait in the kernel
                self.stalled = True
                time.sleep(POLL)
                continue
            if self.stalled:  # its server side is gone, as after a failover
                self.proxy.count_reset()
                return
            ready, _, _ = select.select([self.client, self.server], [], [], POLL)
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is self.client:
                    self._from_client(data, client_frames, commits)
                elif self._from_server(data, server_frames):
                    return

    def _from_client(self, data: bytes, frames: _Frames, commits: CommitSpotter) -> None:
        assert self.server is not None
        for kind, payload in frames.feed(data):
            if self.proxy.refuses(commits.query_of(kind, payload)):
                self.proxy.count_reset()
                self.kill()
                return
            if commits.runs_commit(kind, payload):
                self.proxy.count_commit()
                if self.proxy.take_drop(commits.committed):
                    self._drop_pending = True
        self.server.sendall(data)

    def _from_server(self, data: bytes, frames: _Frames) -> bool:
        """Forward the server's bytes; True once a dropped COMMIT's answer is complete
        (ReadyForQuery seen): the link is then reset without the client getting it."""
        if not self._drop_pending:
            self.client.sendall(data)
            return False
        if any(kind == b"Z" for kind, _ in frames.feed(data)):
            self.proxy.count_dropped()
            self.proxy.hole_after_drop()
            return True
        return False


class PgProxy:
    """The proxy: ``start()``, point the app at ``url(...)``, inject faults, ``stop()``."""

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 5432)) -> None:
        self.upstream = upstream
        self.stats = ProxyStats()
        self.port = 0
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._listener: socket.socket | None = None
        self._hole_until = 0.0
        self._refusing = False
        self._drops_left = 0
        self._touching: bytes | None = None
        self._then_hole = 0.0
        self._refuse_until = 0.0
        self._refused: bytes = b""
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life -----------------------------------------------------------------------------
    def start(self) -> PgProxy:
        """Listen on a free loopback port and accept from a daemon thread; returns self."""
        self._listen()
        self._thread = threading.Thread(target=self._accept_loop, name="pg-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and reset every connection."""
        self._stopped.set()
        self._close_listener()
        self.reset_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def url(self, database_url: str) -> str:
        """``database_url`` (host 127.0.0.1 or localhost, any port) through this proxy."""
        return re.sub(
            r"@(127\.0\.0\.1|localhost)(:\d+)?/", f"@127.0.0.1:{self.port}/", database_url
        )

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(POLL)
        self.port = listener.getsockname()[1]
        self._listener = listener

    def _close_listener(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            self._end_hole_if_due()
            listener = self._listener
            if listener is None:
                time.sleep(POLL)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client)
            with self._lock:
                self._links.add(link)
                self.stats.connections += 1
            link.start()

    # -- faults ---------------------------------------------------------------------------
    def black_hole(self, seconds: float, *, refuse: bool = False) -> None:
        """Forward nothing for ``seconds`` from now (returns at once).

        ``refuse=False``: connections stall (new ones are accepted and held) and those
        held are reset when the hole ends. ``refuse=True``: every connection is reset now
        and new ones are refused until the end.
        """
        with self._lock:
            self._hole_until = time.monotonic() + seconds
            self._refusing = refuse
        if refuse:
            self._close_listener()
            self.reset_all()

    def holed(self) -> bool:
        """Whether a black hole is on now."""
        return time.monotonic() < self._hole_until

    def wait_until_back(self, timeout: float = 600.0) -> float:
        """Block until the hole (and any ``refuse_touching`` window) ended and connections
        are accepted again; the ``time.monotonic()`` at which it was over."""
        deadline = time.monotonic() + timeout
        while self.holed() or self._listener is None or self.refusing():
            if time.monotonic() > deadline:
                raise TimeoutError("the black hole did not end")
            time.sleep(POLL / 2)
        return time.monotonic()

    def refuse_touching(self, seconds: float, touching: bytes) -> None:
        """For ``seconds`` from now, reset each connection as it sends a query containing
        ``touching`` (returns at once)."""
        with self._lock:
            self._refused = touching
            self._refuse_until = time.monotonic() + seconds

    def refusing(self) -> bool:
        """Whether a ``refuse_touching`` window is on now."""
        return time.monotonic() < self._refuse_until

    def refuses(self, query: bytes) -> bool:
        """Whether ``query`` is to be refused now."""
        return bool(query) and self.refusing() and self._refused in query

    def _end_hole_if_due(self) -> None:
        if self.holed() or self._hole_until == 0.0:
            return
        with self._lock:
            refusing, self._refusing = self._refusing, False
            self._hole_until = 0.0
        if refusing and not self._stopped.is_set():
            self._listen()

    def reset_all(self) -> int:
        """Reset every connection now; how many there were."""
        with self._lock:
            links = list(self._links)
        for link in links:
            self.count_reset()
            link.kill()
        return len(links)

    def drop_after_commit(
        self, n: int = 1, *, touching: bytes | None = None, then_hole: float = 0.0
    ) -> None:
        """Lose the acknowledgement of the next ``n`` COMMITs (whichever connection); with
        ``touching``, only of transactions that ran a query containing those bytes; with
        ``then_hole``, a black hole of that many seconds (connections refused) starts as
        the last of them is lost."""
        with self._lock:
            self._drops_left += n
            self._touching = touching
            self._then_hole = then_hole

    def drops_left(self) -> int:
        """Lost acknowledgements asked for and not injected yet."""
        with self._lock:
            return self._drops_left

    # -- bookkeeping (called by the links) ------------------------------------------------
    def take_drop(self, queries: list[bytes]) -> bool:
        """Whether the acknowledgement of this COMMIT (of ``queries``) is to be lost
        (counted)."""
        with self._lock:
            if self._drops_left <= 0:
                return False
            if self._touching is not None and not any(self._touching in q for q in queries):
                return False
            self._drops_left -= 1
            return True

    def count_commit(self) -> None:
        with self._lock:
            self.stats.commits += 1

    def count_dropped(self) -> None:
        with self._lock:
            self.stats.acks_dropped += 1

    def hole_after_drop(self) -> None:
        """A lost acknowledgement was injected: the black hole asked to follow the last."""
        with self._lock:
            seconds = self._then_hole if self._drops_left <= 0 else 0.0
            self._then_hole = 0.0 if seconds > 0 else self._then_hole
        if seconds > 0:
            # Refused, not stalled: the app's retries fail fast and give up after
            # DB_RETRY_SECONDS, as when a database goes away.
            self.black_hole(seconds, refuse=True)

    def count_reset(self) -> None:
        with self._lock:
            self.stats.resets += 1

    def forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def live(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._links)
