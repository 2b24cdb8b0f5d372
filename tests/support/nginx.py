"""Debian's nginx in front of a test's gunicorn, configured with the README's own
``server`` block: only its ports and certificate paths are replaced, so the block that
operators copy is the one the suite runs.

nginx listens on 127.0.0.1 and ::1 (one port), so a client that comes over ::1 has an
address that differs from the one gunicorn sees (nginx's, 127.0.0.1): what the app
records tells which one it believed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path

from tests.support.processes import REPO_ROOT, LoggedProcess
from tests.support.server import free_port

README = REPO_ROOT / "README.md"
NGINX = "/usr/sbin/nginx"
_BLOCK = re.compile(r"^```nginx\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def readme_server_block() -> str:
    """The README's one ```nginx block."""
    blocks = _BLOCK.findall(README.read_text())
    assert len(blocks) == 1, f"the README has {len(blocks)} nginx blocks, not one"
    return str(blocks[0])


def nginx_binary() -> str | None:
    """Debian's nginx (bin/test installs it), or one on the PATH."""
    return NGINX if os.access(NGINX, os.X_OK) else shutil.which("nginx")


def adapted(block: str, port: int, upstream: int, cert: Path, key: Path) -> str:
    """The README's block with this test's ports and certificate (each must be there)."""
    replacements = [
        (r"listen 443 ssl;", f"listen 127.0.0.1:{port} ssl; listen [::1]:{port} ssl;"),
        (r"proxy_pass http://127\.0\.0\.1:8000;", f"proxy_pass http://127.0.0.1:{upstream};"),
        (r"ssl_certificate\s+\S+;", f"ssl_certificate {cert};"),
        (r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {key};"),
    ]
    for pattern, replacement in replacements:
        block, found = re.subn(pattern, replacement, block)
        assert found == 1, f"the README's nginx block has no {pattern!r}"
    return block


class Nginx(LoggedProcess):
    """One nginx master (and worker) serving ``block`` (the README's, by default) on a
    free port, in front of the server on ``upstream``, with ``certificate`` (cert, key)."""

    def __init__(
        self, upstream: int, certificate: tuple[Path, Path], folder: Path, block: str = ""
    ) -> None:
        super().__init__(dict(os.environ), folder / "nginx.log", "nginx")
        self.folder = folder
        self.port = free_port()
        self.server_block = adapted(block or readme_server_block(), self.port, upstream,
                                    *certificate)  # fmt: skip

    @property
    def base_url(self) -> str:
        """The proxy's address over IPv6 loopback."""
        return f"https://[::1]:{self.port}"

    def config(self) -> str:
        """A whole nginx.conf around the server block, everything under ``folder``."""
        f = self.folder
        user = "user root;" if os.geteuid() == 0 else ""
        temps = "\n".join(
            f"    {kind}_temp_path {f / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        return (
            f"{user}\ndaemon off;\nworker_processes 1;\npid {f / 'nginx.pid'};\n"
            f"error_log {f / 'error.log'} info;\nevents {{ worker_connections 64; }}\n"
            f"http {{\n    access_log {f / 'access.log'};\n{temps}\n{self.server_block}\n}}\n"
        )

    def start(self, timeout: float = 15.0) -> Nginx:
        """Write the configuration, start nginx and wait until it accepts connections."""
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("no nginx: apt-get install nginx-light")
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "nginx.conf"
        conf.write_text(self.config())
        self.spawn([binary, "-e", str(self.folder / "error.log"), "-c", str(conf)])
        deadline = time.monotonic() + timeout
        while self.alive and time.monotonic() < deadline:
            try:
                socket.create_connection(("::1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not listen on {self.port}:\n{self.errors()}")

    def errors(self) -> str:
        """nginx's error log."""
        path = self.folder / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop nginx at once (its whole process group)."""
        if self.alive:
            os.killpg(self.pid, signal.SIGKILL)
            self.wait_exit(10)
        self._close_log()
