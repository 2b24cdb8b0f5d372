"""Real S3-compatible servers for tests, started as subprocesses on free loopback ports:
what they share (the AWS variables that point a client at one, a client, fresh buckets,
the wait until one answers, the stop). ``seaweed.py`` and ``moto.py`` start each kind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Self

REGION = "us-east-1"
# Any non-empty pair: the servers check no identity, boto3 only needs something to sign with.
ACCESS_KEY, SECRET_KEY = "speechbatch-test", "speechbatch-test-secret"


class LocalS3:
    """One server process serving S3 on ``port``; subclasses say how to start it."""

    name = "S3 server"

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"

    def command(self) -> list[str]:
        """The server's command line."""
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.port}"

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

    def start(self, timeout: float = 60.0) -> Self:
        """Start (or restart) the server and wait until it stores an object."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = self.command()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.tail()}")
            if self._bucket_ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer S3 within {timeout:g} s:\n{self.tail()}")

    def _bucket_ready(self) -> bool:
        """Whether a bucket can be made and an object written (the storage is up)."""
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
        """Stop the server (the whole process group) and wait for it; a kill by default,
        since a test's server keeps nothing worth a clean stop."""
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
