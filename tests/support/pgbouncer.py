"""A real PgBouncer for tests: Debian's ``pgbouncer`` in transaction mode in front of the
test server, on a free port, with exactly the settings the README gives.

The README's ``[pgbouncer]`` lines (its ``pgbouncer.ini`` example) are read from the README
itself; the rest says where this one listens and whom it lets in (the test server trusts
its clients), and keeps its pool small for tests: two server connections per database,
so that a client's transactions really move between server sessions.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.support.processes import REPO_ROOT
from tests.support.server import free_port

# The README's example, a fenced ``ini`` block that starts with "[databases]".
README_INI = re.compile(r"```ini\n(\[databases\]\n.*?)```", re.DOTALL)
SERVER_CONNECTIONS = 2


def binary() -> str | None:
    """Debian's pgbouncer, or one on the PATH; None when there is neither."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def readme_settings() -> list[str]:
    """The README example's lines of the ``[pgbouncer]`` section (its other settings are
    the deployment's: addresses, authentication)."""
    found = README_INI.search((REPO_ROOT / "README.md").read_text())
    if found is None:
        raise RuntimeError("README.md has no ```ini example of pgbouncer.ini")
    section = found.group(1).split("[pgbouncer]", 1)[1]
    return [line.strip() for line in section.splitlines() if line.strip()]


class PgBouncer:
    """One pgbouncer process in front of the PostgreSQL server of ``server_url``."""

    def __init__(
        self, folder: Path, server_url: str, server_connections: int = SERVER_CONNECTIONS
    ) -> None:
        self.folder = folder
        self.server = make_url(server_url)
        self.server_connections = server_connections
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = folder / "pgbouncer.log"

    def config(self) -> str:
        """The pgbouncer.ini: the README's lines and this test machine's."""
        users = self.folder / "users.txt"
        users.write_text(f'"{self.server.username}" ""\n')
        host, port = self.server.host or "127.0.0.1", self.server.port or 5432
        return "\n".join(
            [
                "[databases]",
                f"* = host={host} port={port}",
                "[pgbouncer]",
                *readme_settings(),
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {users}",
                f"default_pool_size = {self.server_connections}",
                "",
            ]
        )

    def start(self, timeout: float = 10.0) -> PgBouncer:
        """Start it and wait until it accepts connections."""
        path = binary()
        if path is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(self.config())
        # PgBouncer refuses to run as root; it reads its files before it changes user.
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [path, *as_user, str(ini)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start:\n{self.tail()}") from None
                time.sleep(0.05)

    def url(self, database_url: str) -> str:
        """``database_url`` (a database of the server) through this PgBouncer."""
        through = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return through.render_as_string(hide_password=False)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def tail(self, lines: int = 30) -> str:
        """The end of its log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
