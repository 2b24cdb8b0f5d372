"""Audio, exports and renders in an S3-compatible bucket (boto3; see docs/benchmarks.md).

A PUT is atomic: an object is whole or absent, so ``write`` needs no temporary name.
Large files go up in parts (``write_file``): the parts are invisible until the upload
is completed, an upload that fails is aborted, and one whose process was killed is
aborted by ``gc`` once it is older than the age guard. Every error of the store is an
``OSError`` (``StorageUnavailable``), like a full disk is for the folder, so the callers
that turn a failed write into an item error need not know which storage they have.
"""

from __future__ import annotations

import io
import mimetypes
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from speechbatch.adapters.storage import StepNotSupported, StorageUnavailable

# Parts of 8 MiB, four in flight, each read from the file as it is sent: a 500 MB upload
# measured 12 MB above idle (bench/object_store.py).
PART_SIZE = 8 * 1024 * 1024
TRANSFER = TransferConfig(
    multipart_threshold=PART_SIZE,
    multipart_chunksize=PART_SIZE,
    max_concurrency=4,
    use_threads=True,
)
_MISSING = ("404", "NoSuchKey", "NotFound")
# What a store answers for an operation it lacks (S3's own code, or the bare HTTP status).
_UNSUPPORTED = ("NotImplemented", "501", "MethodNotAllowed", "405")
_STORE_ERRORS = (BotoCoreError, ClientError, Boto3Error)


class ObjectBody(io.RawIOBase):
    """An object's bytes, streamed from the store; ``size`` is its length."""

    def __init__(self, body: Any, size: int | None) -> None:
        self._body = body
        self.size = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return bytes(self._body.read(None if size is None or size < 0 else size))
        except _STORE_ERRORS as exc:
            raise StorageUnavailable(f"object storage read failed: {exc}") from exc

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3Storage:
    """Objects under ``prefix`` in one bucket; credentials, region and endpoint
    (``AWS_ENDPOINT_URL``) come from the standard AWS configuration."""

    def __init__(self, bucket: str, prefix: str = "", *, client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix
        # One client for every thread (boto3 clients are thread-safe); the pool is large
        # enough for every item in flight of every job of the process.
        self.client = client or boto3.session.Session().client(
            "s3",
            config=Config(
                connect_timeout=5,
                read_timeout=60,
                retries={"max_attempts": 3, "mode": "standard"},
                max_pool_connections=64,
            ),
        )

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"storage key escapes the prefix: {key!r}")
        return self.prefix + key

    def write(self, key: str, data: bytes) -> None:
        """One PUT: the object is the whole of ``data`` or absent."""
        with _store_errors("write", key):
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=_type(key)
            )

    def write_file(self, key: str, source: Path) -> None:
        """Upload a file in parts, reading it from disk part by part (never whole in
        memory); the object appears only when the upload completes."""
        with _store_errors("upload", key):
            self.client.upload_file(
                str(source),
                self.bucket,
                self._key(key),
                ExtraArgs={"ContentType": _type(key)},
                Config=TRANSFER,
            )

    def open(self, key: str) -> BinaryIO:
        """Stream an object; FileNotFoundError when there is none."""
        with _store_errors("read", key):
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        return ObjectBody(answer["Body"], answer.get("ContentLength"))  # type: ignore[return-value]

    def exists(self, key: str) -> bool:
        """Whether an object is there."""
        try:
            with _store_errors("check", key):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        """Delete an object if it is there (S3's DELETE is idempotent)."""
        with _store_errors("delete", key):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def keys_older_than(self, seconds: float) -> Iterator[str]:
        """Keys of the objects last written more than ``seconds`` ago."""
        cutoff = datetime.now(UTC) - timedelta(seconds=seconds)
        with _store_errors("list", self.prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    if obj["LastModified"] < cutoff:
                        yield obj["Key"][len(self.prefix) :]

    def abort_uploads_older_than(self, seconds: float) -> list[str]:
        """Abort the unfinished multipart uploads begun more than ``seconds`` ago (a
        process killed mid-upload leaves one, billed by the store but never visible);
        what was aborted, as ``KEY (unfinished upload)``. StepNotSupported when the store
        has no multipart listing."""
        cutoff = datetime.now(UTC) - timedelta(seconds=seconds)
        aborted = []
        with _store_errors("list uploads", self.prefix):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            uploads = [u for page in pages for u in page.get("Uploads", [])]
            for upload in uploads:
                if upload["Initiated"] < cutoff:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted.append(f"{upload['Key'][len(self.prefix) :]} (unfinished upload)")
        return aborted

    def download_url(self, key: str, content_type: str, filename: str) -> str | None:
        """A presigned GET of the object for five minutes, answering ``content_type``
        and ``filename`` as an attachment."""
        with _store_errors("sign", key):
            return str(
                self.client.generate_presigned_url(
                    "get_object",
                    Params={
                        "Bucket": self.bucket,
                        "Key": self._key(key),
                        "ResponseContentType": content_type,
                        "ResponseContentDisposition": f'attachment; filename="{filename}"',
                    },
                    ExpiresIn=300,
                )
            )


def _type(key: str) -> str:
    return mimetypes.guess_type(key)[0] or "application/octet-stream"


@contextmanager
def _store_errors(operation: str, key: str) -> Iterator[None]:
    """Turn the store's errors into OSErrors: FileNotFoundError for a missing object,
    StorageUnavailable (with a message that names the operation) for the rest."""
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _MISSING:
            raise FileNotFoundError(f"no object {key!r}") from exc
        if code in _UNSUPPORTED:
            raise StepNotSupported(
                f"the store does not implement {exc.operation_name} ({code})"
            ) from exc
        raise StorageUnavailable(f"object storage {operation} of {key!r} failed: {exc}") from exc
    except (BotoCoreError, Boto3Error) as exc:
        raise StorageUnavailable(f"object storage {operation} of {key!r} failed: {exc}") from exc
