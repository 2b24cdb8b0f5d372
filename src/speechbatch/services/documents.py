"""Importing a document (``.txt``, ``.md``, ``.epub``) as a job of chapters and items."""

from __future__ import annotations

import logging
from pathlib import PurePath
from typing import Any

from speechbatch.adapters.documents import DOCUMENT_SUFFIXES, read_document
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.documents import split_document
from speechbatch.errors import ValidationError
from speechbatch.services.jobs import MAX_ITEMS, MAX_TITLE, Limits, validate_head

log = logging.getLogger(__name__)

MIN_ITEM_CHARACTERS = 200
MAX_ITEM_CHARACTERS = 4096
DEFAULT_ITEM_CHARACTERS = 1500

__all__ = ["DOCUMENT_SUFFIXES", "import_document", "max_characters_of"]


def max_characters_of(raw: Any, limits: Limits) -> int:
    """The ``max_characters`` of an import: 200 to 4,096 (and the provider's limit),
    1,500 when absent; 422 otherwise."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return min(DEFAULT_ITEM_CHARACTERS, limits.max_chars)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValidationError("max_characters must be an integer", field="max_characters") from None
    upper = min(MAX_ITEM_CHARACTERS, limits.max_chars)
    if not MIN_ITEM_CHARACTERS <= value <= upper:
        raise ValidationError(
            f"max_characters must be between {MIN_ITEM_CHARACTERS} and {upper}",
            field="max_characters",
        )
    return value


def _default_title(filename: str) -> str:
    stem = PurePath(filename.replace("\\", "/")).stem.strip()
    return stem[:MAX_TITLE] or "Imported document"


def import_document(
    uow_factory: UowFactory,
    user: UserRecord,
    *,
    filename: str,
    data: bytes,
    voice: Any,
    title: Any,
    max_characters: Any,
    limits: Limits,
) -> int:
    """Read, split and store a document as a new PENDING job with chapters; return its id.

    422 for an unsupported or malformed file, a document without text, or one that would
    make more than 5,000 items (the message says how many). Without a title (None), the
    file's name is the title."""
    if title is None:
        title = _default_title(filename)
    title, voice = validate_head(title, voice, limits)
    max_chars = max_characters_of(max_characters, limits)
    sections = read_document(filename, data, title)
    split = split_document(sections, max_chars)
    if not split.items:
        raise ValidationError("the document contains no text to speak", field="file")
    if len(split.items) > MAX_ITEMS:
        raise ValidationError(
            f"the document would make {len(split.items)} items; a job has at most {MAX_ITEMS}"
            " (raise max_characters or split the document)",
            field="file",
        )
    texts = [item.text for item in split.items]
    if any("\x00" in t for t in texts):
        raise ValidationError("the document contains a NUL character", field="file")
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(
            user.organization_id, user.id, title, voice, texts,
            item_chapters=[item.chapter for item in split.items],
            chapters=[(c.index, c.title, c.first_position) for c in split.chapters],
        )  # fmt: skip
        uow.commit()
    log.info("imported job=%s items=%s chapters=%s", job_id, len(texts), len(split.chapters))
    return job_id
