"""moto's S3 (``moto[server]``: ``moto_server``) as a second S3 implementation beside
SeaweedFS: one process on a free loopback port, everything in its memory.

Its multipart listing reports every upload as begun in 2010 (a fixed date), so on moto
an upload of any age is older than gc's guard.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.support.s3 import LocalS3
from tests.support.server import free_port


def moto_binary() -> str | None:
    """The ``moto_server`` beside this Python, or of the PATH; None when neither exists."""
    beside = Path(sys.executable).parent / "moto_server"
    return str(beside) if beside.exists() else shutil.which("moto_server")


class MotoServer(LocalS3):
    """One ``moto_server`` process (its buckets are gone when it stops)."""

    name = "moto_server"

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, free_port())

    def command(self) -> list[str]:
        binary = moto_binary()
        if binary is None:
            raise RuntimeError("no moto_server: pip install 'moto[server]'")
        return [binary, "-H", "127.0.0.1", "-p", str(self.port)]
