"""A job's input: validation, parsing pasted text and CSV, storing a new job."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.editing import OptionsError, clean_options, options_json
from speechbatch.errors import (
    ValidationError,
)

log = logging.getLogger(__name__)

MAX_TITLE = 200
MAX_ITEMS = 5000


@dataclass(frozen=True)
class Limits:
    """What a job may contain, given the configured provider."""

    voices: tuple[str, ...]
    max_chars: int


def _storable(text: str) -> bool:
    """Whether a text can be stored: no NUL, no lone surrogate (not valid UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_job(title: Any, voice: Any, texts: Any, limits: Limits) -> tuple[str, str, list[str]]:
    """Trim and check a job's input; raise ValidationError naming the field."""
    if not isinstance(title, str) or not title.strip():
        raise ValidationError("title is required", field="title")
    title = title.strip()
    if len(title) > MAX_TITLE:
        raise ValidationError(f"title is longer than {MAX_TITLE} characters", field="title")
    if not isinstance(voice, str) or voice.strip() not in limits.voices:
        raise ValidationError(f"voice must be one of: {', '.join(limits.voices)}", field="voice")
    if not isinstance(texts, list) or not texts:
        raise ValidationError("items must be a non-empty list of texts", field="items")
    if len(texts) > MAX_ITEMS:
        raise ValidationError(f"a job has at most {MAX_ITEMS} items", field="items")
    cleaned = [_clean_text(text, f"item {n}", "items", limits) for n, text in enumerate(texts, 1)]
    if not _storable(title):
        raise ValidationError("title contains a NUL or an invalid character", field="title")
    return title, voice.strip(), cleaned


def _clean_text(text: Any, name: str, field: str, limits: Limits) -> str:
    """One item's text trimmed and checked; ValidationError naming it otherwise."""
    if not isinstance(text, str):
        raise ValidationError(f"{name} is not a text", field=field)
    text = text.strip()
    if not text:
        raise ValidationError(f"{name} is empty", field=field)
    if len(text) > limits.max_chars:
        raise ValidationError(f"{name} is longer than {limits.max_chars} characters", field=field)
    if not _storable(text):
        raise ValidationError(f"{name} contains a NUL or an invalid character", field=field)
    return text


def validate_text(text: Any, limits: Limits) -> str:
    """An edited item's text, checked as at creation."""
    return _clean_text(text, "text", "text", limits)


def create_job(
    uow_factory: UowFactory,
    user: UserRecord,
    title: Any,
    voice: Any,
    texts: Any,
    limits: Limits,
    options: Any = None,
) -> int:
    """Validate and store a new PENDING job (with its ``options``, None: none); return
    its id."""
    title, voice, cleaned = validate_job(title, voice, texts, limits)
    try:
        stored = options_json(clean_options({} if options is None else options))
    except OptionsError as exc:
        raise ValidationError(str(exc), field="options") from None
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(
            user.organization_id, user.id, title, voice, cleaned, options=stored
        )
        uow.commit()
    return job_id


def parse_items_text(text: str) -> list[str]:
    """Items from pasted text or a TXT upload: one per non-blank line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_items_csv(text: str) -> list[str]:
    """Items from a CSV upload: the first column of each row (a 'text' header is skipped)."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text)) if r and r[0].strip()]
    if rows and rows[0][0].strip().lower() in ("text", "item", "items"):
        rows = rows[1:]
    return [r[0].strip() for r in rows]


def texts_of(values: Sequence[str]) -> list[str]:
    """Drop blank lines from a list of texts."""
    return [v for v in values if v.strip()]
