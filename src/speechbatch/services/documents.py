"""Importing a document (``.txt``, ``.md``, ``.epub``) as a job of chapters and items, with
the chapters a person chose (``read_choices`` offers them first), or a script (``.txt``,
``.md`` of ``NAME: text`` lines) as items with their speakers."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from speechbatch.adapters.documents import (
    DOCUMENT_SUFFIXES,
    document_kind,
    read_book,
    read_script,
)
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.book_source import source_key
from speechbatch.domain.documents import Book, Section, SplitDocument, SplitItem, split_document
from speechbatch.domain.limits import MAX_ITEM_CHARACTERS, MIN_ITEM_CHARACTERS
from speechbatch.domain.scripts import split_script
from speechbatch.errors import ValidationError
from speechbatch.services.books import clean_author, store_cover
from speechbatch.services.idempotency import KeyClaim, bind_key
from speechbatch.services.jobs import MAX_ITEMS, MAX_TITLE, Limits, validate_head

if TYPE_CHECKING:  # ports imports jobs, which imports books
    from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)

DEFAULT_ITEM_CHARACTERS = 1500
# What an upload is read as: prose cut into items, or a script of one item per line.
IMPORT_FORMATS = ("document", "script")

__all__ = [
    "DOCUMENT_SUFFIXES", "IMPORT_FORMATS", "Imported", "chapters_of", "import_document",
    "import_format", "max_characters_of", "read_choices",
]  # fmt: skip


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


def import_format(raw: Any) -> str:
    """An import's ``format``: ``document`` (the default) or ``script``; 422 otherwise."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return "document"
    if not isinstance(raw, str) or raw.strip() not in IMPORT_FORMATS:
        raise ValidationError("format must be 'document' or 'script'", field="format")
    return raw.strip()


def _default_title(filename: str) -> str:
    stem = PurePath(filename.replace("\\", "/")).stem.strip()
    return stem[:MAX_TITLE] or "Imported document"


@dataclass(frozen=True)
class Imported:
    """An imported job, and every chapter of its document with whether it was kept."""

    job_id: int
    document: dict[str, Any]


def chapters_of(raw: Any, count: int) -> list[int] | None:
    """The chapter indexes an import keeps: None when not given (the default choice),
    else distinct integers below ``count``; 422 naming ``chapters`` otherwise. A form
    gives them as repeated fields, a comma list or a JSON array."""
    if raw is None:
        return None
    values = raw if isinstance(raw, list) else [raw]
    found: list[int] = []
    for value in values:
        if isinstance(value, str):
            text = value.strip().removeprefix("[").removesuffix("]")
            found.extend(_index(part) for part in text.split(",") if part.strip())
        else:
            found.append(_index(value))
    if not found:
        raise ValidationError("keep at least one chapter", field="chapters")
    outside = sorted(i for i in set(found) if not 0 <= i < count)
    if outside:
        raise ValidationError(
            f"the document has chapters 0 to {count - 1}; there is no chapter {outside[0]}",
            field="chapters",
        )
    return sorted(set(found))


def _index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationError("chapters must be chapter indexes (integers)", field="chapters")
    try:
        return int(value)
    except ValueError:
        raise ValidationError(
            "chapters must be chapter indexes (integers)", field="chapters"
        ) from None


def _own_title(book: Book, fallback: str, voice: str, limits: Limits) -> str:
    """The document's own title when it has a usable one, else ``fallback``."""
    if book.title:
        try:
            return validate_head(book.title[:MAX_TITLE], voice, limits)[0]
        except ValidationError:
            pass
    return fallback


def read_choices(filename: str, data: bytes) -> dict[str, Any]:
    """What a document offers to import, before anything is stored: its own title and
    author, and its chapters with whether the default choice keeps them (all but an
    EPUB's front and back matter); 422 for a file that cannot be read."""
    book = read_book(filename, data, "")
    return _document(book, _spoken(book, book.title or _default_title(filename)), None)


def _spoken(book: Book, title: str) -> list[Section]:
    """The document's chapters (its sections with text), a chapter without a title of
    its own named ``title``."""
    return [replace(s, title=s.title or title) for s in book.sections if s.spoken]


def _document(book: Book, sections: list[Section], kept: list[int] | None) -> dict[str, Any]:
    chosen = set(range(len(sections))) if kept is None else set(kept)
    if kept is None:
        chosen = {n for n, s in enumerate(sections) if not s.matter} or chosen
    return {
        "title": book.title,
        "author": book.author,
        "chapters": [
            {"index": n, "title": s.title, "kept": n in chosen, "front_back_matter": s.matter}
            for n, s in enumerate(sections)
        ],
    }


@dataclass(frozen=True)
class _Made:
    """What an import stores: the items' texts, chapters and speakers, the job's title
    and author, and the document's chapters as the answer lists them."""

    split: SplitDocument
    speakers: list[str | None] | None
    title: str
    author: str | None
    document: dict[str, Any]
    cover: bytes | None = None
    epub: bool = False  # its source is kept: a read-along is made of its own pages


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
    chapters: Any = None,
    author: Any = None,
    storage: Storage | None = None,
    idempotency: KeyClaim | None = None,
    format: Any = None,
) -> Imported:
    """Read, split and store a document as a new PENDING job with chapters.

    ``chapters`` (indexes into the document's chapters) says which to keep; by default
    all but an EPUB's front and back matter. A blank title takes the document's own
    (else the file's name) and a blank author the EPUB's; an EPUB's cover image becomes
    the job's cover, and the EPUB itself is kept for read-along renders (in ``storage``).
    ``format`` "script": a script, one item per line with its speaker. 422 for an
    unsupported or malformed file, a document without text, or one that would make more
    than 5,000 items (the message says how many). With ``idempotency``, the request's
    key is tied to the job as it is stored."""
    given_title = title if isinstance(title, str) and title.strip() else None
    title, voice = validate_head(given_title or _default_title(filename), voice, limits)
    max_chars = max_characters_of(max_characters, limits)
    given_author = clean_author(author if isinstance(author, str) and author.strip() else None)
    if import_format(format) == "script":
        made = _from_script(filename, data, title, given_author, max_chars)
    else:
        book = read_book(filename, data, "")
        if given_title is None:
            title = _own_title(book, title, voice, limits)
        made = _from_book(book, title, given_author, chapters, max_chars)
        made = replace(made, epub=document_kind(filename, data) == "epub")
    texts = [item.text for item in made.split.items]
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(
            user.organization_id, user.id, made.title, voice, texts,
            item_chapters=[item.chapter for item in made.split.items],
            chapters=[(c.index, c.title, c.first_position) for c in made.split.chapters],
            speakers=made.speakers,
        )  # fmt: skip
        if made.author is not None:
            uow.books.set_author(job_id, user.organization_id, made.author)
        bind_key(uow, idempotency, f"job:{job_id}")
        uow.commit()
    log.info("imported job=%s items=%s chapters=%s", job_id, len(texts), len(made.split.chapters))
    if made.cover is not None and storage is not None:
        _store_book_cover(uow_factory, storage, user, job_id, made.cover)
    if made.epub and storage is not None:
        _keep_source(storage, user, job_id, data)
    return Imported(job_id, made.document)


def _from_book(book: Book, title: str, author: str | None, chapters: Any, max_chars: int) -> _Made:
    """A document's chosen chapters split into items."""
    if author is None and book.author:
        author = clean_author(book.author[:MAX_TITLE])
    sections = _spoken(book, title)
    document = _document(book, sections, chapters_of(chapters, len(sections)))
    kept = [s for s, c in zip(sections, document["chapters"], strict=True) if c["kept"]]
    return _Made(
        _checked(split_document(kept, max_chars)), None, title, author, document, book.cover
    )


def _from_script(
    filename: str, data: bytes, title: str, author: str | None, max_chars: int
) -> _Made:
    """A script's lines as items with their speakers (every chapter kept)."""
    text, markdown = read_script(filename, data)
    script = split_script(text, max_chars, markdown=markdown, title=title)
    split = SplitDocument(
        tuple(SplitItem(item.text, item.chapter) for item in script.items), script.chapters
    )
    speakers = [item.speaker for item in script.items]
    document = {
        "title": None,
        "author": None,
        "chapters": [
            {"index": c.index, "title": c.title, "kept": True, "front_back_matter": False}
            for c in script.chapters
        ],
    }
    return _Made(_checked(split), speakers if any(speakers) else None, title, author, document)


def _checked(split: SplitDocument) -> SplitDocument:
    """The items an import makes; 422 when they are none, too many, or hold a NUL."""
    if not split.items:
        raise ValidationError("the document contains no text to speak", field="file")
    if len(split.items) > MAX_ITEMS:
        raise ValidationError(
            f"the document would make {len(split.items)} items; a job has at most {MAX_ITEMS}"
            " (raise max_characters, leave chapters out or split the document)",
            field="file",
        )
    if any("\x00" in item.text for item in split.items):
        raise ValidationError("the document contains a NUL character", field="file")
    return split


def _keep_source(storage: Storage, user: UserRecord, job_id: int, data: bytes) -> None:
    """Keep the imported EPUB (already read within bounds) under the job's source key,
    for its read-along renders; should that fail, the job is imported all the same and
    its read-along is a plain book."""
    try:
        storage.write(source_key(user.organization_id, job_id), data)
    except OSError as exc:
        log.warning("EPUB source not kept job=%s: %s", job_id, exc)


def _store_book_cover(
    uow_factory: UowFactory, storage: Storage, user: UserRecord, job_id: int, data: bytes
) -> None:
    """The EPUB's cover as the job's; a cover that is not a readable image within bounds
    is left out (the book is imported without it), never a reason to refuse the import."""
    try:
        store_cover(uow_factory, storage, user.organization_id, job_id, data)
    except ValidationError as exc:
        log.info("EPUB cover left out job=%s: %s", job_id, exc.message)
