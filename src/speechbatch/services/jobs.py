"""A job's input: validation, parsing pasted text and CSV, storing a new job."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.cast import CastError, clean_speaker
from speechbatch.domain.editing import OptionsError, clean_options, options_json
from speechbatch.domain.limits import MAX_CAST, MAX_ITEMS, MAX_KEY, MAX_TITLE
from speechbatch.domain.text import has_visible, text_problem
from speechbatch.errors import (
    ValidationError,
)
from speechbatch.services.books import clean_author
from speechbatch.services.idempotency import KeyClaim, bind_key

log = logging.getLogger(__name__)

KEY_PATTERN = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_KEY}}}")
KEY_TRIMMED = " \t\n\r"  # what is trimmed around a key (the OpenAPI pattern says the same)
ITEM_FIELDS = {"text", "key", "speaker"}


@dataclass(frozen=True)
class Limits:
    """What a job may contain, given the configured provider."""

    voices: tuple[str, ...]
    max_chars: int


def _storable(text: str) -> bool:
    """Whether a text can be stored: no NUL, no lone surrogate (not valid UTF-8)."""
    return text_problem(text) is None


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


def _item_speaker(n: int, speaker: Any) -> str:
    """Item ``n``'s trimmed speaker; 422 unless 1-50 characters of text."""
    try:
        return clean_speaker(speaker)
    except CastError as exc:
        raise ValidationError(f"item {n}: {exc}", field="items") from None


def validate_items(
    entries: Any, limits: Limits
) -> tuple[list[str], list[str | None], list[str | None]]:
    """Trim and check items given as texts or ``{"text", "key"?, "speaker"?}`` objects;
    return the texts, their keys and their speakers (None where an item has none)."""
    if not isinstance(entries, list) or not entries:
        raise ValidationError("items must be a non-empty list of texts", field="items")
    if len(entries) > MAX_ITEMS:
        raise ValidationError(f"a job has at most {MAX_ITEMS} items", field="items")
    texts: list[str] = []
    keys: list[str | None] = []
    speakers: list[str | None] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            if set(entry) - ITEM_FIELDS:
                raise ValidationError(
                    f"item {n} has fields other than text, key and speaker", field="items"
                )
            texts.append(_item_text(n, entry.get("text"), limits))
            keys.append(_item_key(n, entry["key"], seen) if "key" in entry else None)
            speakers.append(_item_speaker(n, entry["speaker"]) if "speaker" in entry else None)
        else:
            texts.append(_item_text(n, entry, limits))
            keys.append(None)
            speakers.append(None)
    return texts, keys, speakers


def validate_head(title: Any, voice: Any, limits: Limits) -> tuple[str, str]:
    """Trim and check a job's title and voice; raise ValidationError naming the field."""
    if not isinstance(title, str) or not title.strip():
        raise ValidationError("title is required", field="title")
    title = title.strip()
    if not has_visible(title):
        raise ValidationError("title needs a visible character", field="title")
    if len(title) > MAX_TITLE:
        raise ValidationError(f"title is longer than {MAX_TITLE} characters", field="title")
    if not isinstance(voice, str) or voice.strip() not in limits.voices:
        raise ValidationError(f"voice must be one of: {', '.join(limits.voices)}", field="voice")
    if not _storable(title):
        raise ValidationError("title contains a NUL or an invalid character", field="title")
    return title, voice.strip()


def validate_cast(raw: Any, limits: Limits, *, allow_removal: bool) -> dict[str, str | None]:
    """A cast from a request, ``{SPEAKER: VOICE}``, each voice one of the deployment's
    (with ``allow_removal``, null takes a speaker out: their lines go to the narrator)."""
    if not isinstance(raw, dict):
        raise ValidationError("cast must be an object of speaker: voice", field="cast")
    if len(raw) > MAX_CAST:
        raise ValidationError(f"a cast has at most {MAX_CAST} speakers", field="cast")
    cleaned: dict[str, str | None] = {}
    for name, voice in raw.items():
        try:
            speaker = clean_speaker(name)
        except CastError as exc:
            raise ValidationError(f"cast: {exc}", field="cast") from None
        if speaker in cleaned:
            raise ValidationError(f"cast: {speaker!r} is named twice", field="cast")
        if voice is None and allow_removal:
            cleaned[speaker] = None
        elif isinstance(voice, str) and voice.strip() in limits.voices:
            cleaned[speaker] = voice.strip()
        else:
            raise ValidationError(
                f"cast: the voice of {speaker!r} must be one of: {', '.join(limits.voices)}",
                field="cast",
            )
    return cleaned


def validate_job(title: Any, voice: Any, texts: Any, limits: Limits) -> tuple[str, str, list[str]]:
    """Trim and check a job's input; raise ValidationError naming the field."""
    head = validate_head(title, voice, limits)
    cleaned, _keys, _speakers = validate_items(texts, limits)
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
    author: Any = None,
    idempotency: KeyClaim | None = None,
    cast: Any = None,
) -> int:
    """Validate and store a new PENDING job (with its ``options``, None: none, its
    ``author`` and its ``cast``, None: none); return its id. With ``idempotency``, the
    request's key is tied to the job as it is stored."""
    title, voice = validate_head(title, voice, limits)
    cleaned_author = clean_author(author)
    cleaned, keys, speakers = validate_items(texts, limits)
    members = validate_cast({} if cast is None else cast, limits, allow_removal=False)
    try:
        stored = options_json(clean_options({} if options is None else options))
    except OptionsError as exc:
        raise ValidationError(str(exc), field="options") from None
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(
            user.organization_id, user.id, title, voice, cleaned,
            keys=keys if any(keys) else None, options=stored,
            speakers=speakers if any(speakers) else None,
        )  # fmt: skip
        if members:
            uow.edits.change_cast(job_id, members)
        if cleaned_author is not None:
            uow.books.set_author(job_id, user.organization_id, cleaned_author)
        bind_key(uow, idempotency, f"job:{job_id}")
        uow.commit()
    return job_id


def parse_items_text(text: str) -> list[str]:
    """Items from pasted text or a TXT upload: one per non-blank line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _cell(row: list[str], column: int | None) -> str:
    return row[column].strip() if column is not None and column < len(row) else ""


def parse_items_csv(text: str) -> list[str | dict[str, str]]:
    """Items from a CSV upload: with a header naming a ``text`` column (and optionally
    ``key`` and ``speaker`` ones), those columns; otherwise the first column of each row
    (a lone 'item' or 'items' header is skipped)."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    header = [c.strip().lower() for c in rows[0]] if rows else []
    if "text" in header:
        columns = {
            name: header.index(name) for name in ("text", "key", "speaker") if name in header
        }
        entries: list[str | dict[str, str]] = []
        for row in rows[1:]:
            cells = {name: _cell(row, at) for name, at in columns.items()}
            extra = {name: cell for name, cell in cells.items() if cell and name != "text"}
            if cells["text"] or extra:
                entries.append({"text": cells["text"], **extra} if extra else cells["text"])
        return entries
    rows = [r for r in rows if r[0].strip()]
    if rows and rows[0][0].strip().lower() in ("item", "items"):
        rows = rows[1:]
    return [r[0].strip() for r in rows]


def texts_of(values: Sequence[str]) -> list[str]:
    """Drop blank lines from a list of texts."""
    return [v for v in values if v.strip()]
