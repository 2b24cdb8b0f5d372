"""A job as a book: its author and its cover, which a render writes into its tags.

``store_cover`` is the one way a cover gets in, whether uploaded (``PUT
/api/jobs/ID/cover``) or taken from an imported EPUB: it checks the image, writes it
under a key of its own (so what is stored under a key never changes), makes it the
job's cover, and deletes the one it replaced once that commit is known to have happened.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from speechbatch.adapters.images import EXTENSIONS, cover_type, stored_type
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.limits import MAX_TITLE
from speechbatch.errors import NotFound, ValidationError

if TYPE_CHECKING:  # ports imports jobs, which imports this
    from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)


def clean_author(value: Any) -> str | None:
    """A job's author, trimmed (null or blank: none); 422 naming the field otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError("author must be a text or null", field="author")
    value = value.strip()
    if len(value) > MAX_TITLE:
        raise ValidationError(f"author is longer than {MAX_TITLE} characters", field="author")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValidationError("author must be one line without control characters", "author")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("author contains an invalid character", field="author") from None
    return value or None


def set_author(uow_factory: UowFactory, user: UserRecord, job_id: int, author: Any) -> None:
    """Set (or with null, clear) the job's author; in any state of the job, since no
    audio depends on it."""
    cleaned = clean_author(author)
    with uow_factory() as uow:
        if not uow.books.set_author(job_id, user.organization_id, cleaned):
            raise NotFound("job not found")
        uow.commit()


def store_cover(
    uow_factory: UowFactory, storage: Storage, organization_id: int, job_id: int, data: bytes
) -> str:
    """Check ``data`` is a JPEG or PNG within bounds (422 otherwise), store it and make
    it the job's cover; its MIME type. NotFound for another organization's job."""
    mime = cover_type(data)
    with uow_factory(read_only=True) as reader:
        exists, _ = reader.books.cover_of(job_id, organization_id)
    if not exists:
        raise NotFound("job not found")
    key = f"covers/{organization_id}/job-{job_id}/{uuid.uuid4().hex}.{EXTENSIONS[mime]}"
    storage.write(key, data)
    # Should this commit's outcome be unknown, the new file stays for gc to judge.
    with uow_factory() as uow:
        replaced = uow.books.set_cover(job_id, organization_id, key)
        uow.commit()
    if replaced is not None and replaced != key:
        storage.delete(replaced)
    log.info("cover stored job=%s key=%s bytes=%s", job_id, key, len(data))
    return mime


def cover_file(uow_factory: UowFactory, user: UserRecord, job_id: int) -> tuple[str, str]:
    """The job's cover: its storage key and MIME type; NotFound when it has none."""
    with uow_factory(read_only=True) as uow:
        exists, key = uow.books.cover_of(job_id, user.organization_id)
    if not exists:
        raise NotFound("job not found")
    if key is None:
        raise NotFound("this job has no cover")
    return key, stored_type(key)
