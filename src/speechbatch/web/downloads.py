"""Stored files over HTTP: streamed from the storage (folder or bucket) with their type,
length, an ETag and ranges, or a redirect to a presigned URL when the settings ask.

Every download is also ``application/octet-stream`` for a client that asks for that and
not for the file's own type (``Accept``): the OpenAPI document lists both, so that a
generated client that knows only generic bytes can still type the answer."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import BinaryIO

from flask import redirect, request, send_file
from werkzeug.wrappers import Response

from speechbatch.errors import NotFound, StorageUnreachable
from speechbatch.services.ports import AppServices

log = logging.getLogger(__name__)

BYTES = "application/octet-stream"


def negotiated(mimetype: str) -> str:
    """``mimetype``, or generic bytes when the request's ``Accept`` prefers those (no
    ``Accept``, or ``*/*``, keeps the file's own type)."""
    if request.accept_mimetypes.best_match([mimetype, BYTES]) == BYTES:
        return BYTES
    return mimetype


def stored_file(
    s: AppServices,
    key: str,
    *,
    mimetype: str,
    download_name: str,
    as_attachment: bool = False,
    missing: str = "the file is missing",
) -> Response:
    """The bytes behind ``key``, streamed (never read whole); 404 with ``missing`` when
    the storage has no such key."""
    mimetype = negotiated(mimetype)
    try:
        if s.settings.storage_presigned_downloads:
            url = s.storage.download_url(key, mimetype, download_name)
            if url is not None:
                return redirect(url, 302)
        source = s.storage.open(key)
    except FileNotFoundError:
        raise NotFound(missing) from None
    except OSError as exc:
        # A store that is down is the server's trouble for a moment, not a broken file.
        log.warning("storage read of %s failed: %s", key, exc)
        raise StorageUnreachable() from None
    return streamed(
        source, mimetype=mimetype, download_name=download_name, as_attachment=as_attachment,
        version=key,
    )  # fmt: skip


def streamed(
    source: BinaryIO,
    *,
    mimetype: str,
    download_name: str,
    as_attachment: bool = False,
    version: str,
) -> Response:
    """An open stream as a download: its type, length, ranges, and an ETag made from
    ``version``, a name whose bytes never change (a stored key)."""
    response = send_file(
        source,
        mimetype=mimetype,
        as_attachment=as_attachment,
        download_name=download_name,
        max_age=0,
        conditional=False,
        etag=False,
    )
    size = _size(source)
    if size is not None:
        response.content_length = size
    # A key carries its attempt (or its export's id): what is stored under it never
    # changes, so the key alone is a strong validator.
    response.set_etag(hashlib.sha256(version.encode()).hexdigest()[:32])
    return response.make_conditional(request.environ, accept_ranges=True, complete_length=size)


def _size(source: BinaryIO) -> int | None:
    size = getattr(source, "size", None)
    if isinstance(size, int):
        return size
    try:
        return os.fstat(source.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        return None
