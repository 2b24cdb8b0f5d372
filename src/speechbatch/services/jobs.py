"""A job's input: validation, parsing pasted text and CSV, storing a new job."""

from __future__ import annotations

import logging
import re
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
MAX_KEY = 100
KEY_PATTERN = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_KEY}}}")
KEY_TRIMMED = " \t\n\r"  # what is trimmed around a key (the OpenAPI pattern says the same)


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


def _item_text(n: int, text: Any, limits: Limits) -> str:
    """Item ``n``'s trimmed text; raise ValidationError when it cannot be one."""
    return _clean_text(text, f"item {n}", "items", limits)


def _item_key(n: int, key: Any, seen: set[str]) -> str:
    """Item ``n``'s trimmed key; 422 unless 1-100 of A-Z a-z 0-9 . _ - and unique in the
    job."""
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key.strip(KEY_TRIMMED)):
        raise ValidationError(
            f"item {n}: a key is 1 to {MAX_KEY} characters of A-Z a-z 0-9 . _ -", field="items"
        )
    key = key.strip(KEY_TRIMMED)
    if key in seen:
        raise ValidationError(f"item {n}: the key {key!r} is used twice", field="items")
    seen.add(key)
    return key


def validate_items(entries: Any, limits: Limits) -> tuple[list[str], list[str | None]]:
    """Trim and check items given as texts or ``{"text", "key"}`` objects; return the
    texts and their keys (None where an item has none)."""
    if not isinstance(entries, list) or not entries:
        raise ValidationError("items must be a non-empty list of texts", field="items")
    if len(entries) > MAX_ITEMS:
        raise ValidationError(f"a job has at most {MAX_ITEMS} items", field="items")
    texts: list[str] = []
    keys: list[str | None] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            if set(entry) - {"text", "key"}:
                raise ValidationError(f"item {n} has fields other than text and key", field="items")
            texts.append(_item_text(n, entry.get("text"), limits))
            keys.append(_item_key(n, entry["key"], seen) if "key" in entry else None)
        else:
            texts.append(_item_text(n, entry, limits))
            keys.append(None)
    return texts, keys


def validate_head(title: Any, voice: Any, limits: Limits) -> tuple[str, str]:
    """Trim and check a job's title and voice; raise ValidationError naming the field."""
    if not isinstance(title, str) or not title.strip():
        raise ValidationError("title is required", field="title")
    title = title.strip()
    if len(title) > MAX_TITLE:
        raise ValidationError(f"title is longer than {MAX_TITLE} characters", field="title")
    if not isinstance(voice, str) or voice.strip() not in limits.voices:
        raise ValidationError(f"voice must be one of: {', '.join(limits.voices)}", field="voice")
    if not _storable(title):
        raise ValidationError("title contains a NUL or an invalid character", field="title")
    return title, voice.strip()


def validate_job(title: Any, voice: Any, texts: Any, limits: Limits) -> tuple[str, str, list[str]]:
    """Trim and check a job's input; raise ValidationError naming the field."""
    head = validate_head(title, voice, limits)
    cleaned, _keys = validate_items(texts, limits)
    return *head, cleaned


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
    title, voice = validate_head(title, voice, limits)
    cleaned, keys = validate_items(texts, limits)
    try:
        stored = options_json(clean_options({} if options is None else options))
    except OptionsError as exc:
        raise ValidationError(str(exc), field="options") from None
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(
            user.organization_id, user.id, title, voice, cleaned,
            keys=keys if any(keys) else None, options=stored,
        )  # fmt: skip
        uow.commit()
    return job_id


def parse_items_text(text: str) -> list[str]:
    """Items from pasted text or a TXT upload: one per non-blank line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _cell(row: list[str], column: int | None) -> str:
    return row[column].strip() if column is not None and column < len(row) else ""


def parse_items_csv(text: str) -> list[str | dict[str, str]]:
    """Items from a CSV upload: with a header naming a ``text`` column (and optionally a
    ``key`` one), those columns; otherwise the first column of each row (a lone 'item' or
    'items' header is skipped)."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    header = [c.strip().lower() for c in rows[0]] if rows else []
    if "text" in header:
        text_at = header.index("text")
        key_at = header.index("key") if "key" in header else None
        entries: list[str | dict[str, str]] = []
        for row in rows[1:]:
            body, key = _cell(row, text_at), _cell(row, key_at)
            if body or key:
                entries.append({"text": body, "key": key} if key else body)
        return entries
    rows = [r for r in rows if r[0].strip()]
    if rows and rows[0][0].strip().lower() in ("item", "items"):
        rows = rows[1:]
    return [r[0].strip() for r in rows]


def texts_of(values: Sequence[str]) -> list[str]:
    """Drop blank lines from a list of texts."""
    return [v for v in values if v.strip()]
