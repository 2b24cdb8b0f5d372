"""How much an import may read, and the one place a reader's failure becomes a sentence.

An upload is at most 25 MiB, but what it unpacks to or parses into is not: a ZIP entry of
zeros unpacks a thousand times over, a Markdown file of one-character lines or list items
makes a token per byte, and a parser that backtracks spends seconds per kilobyte. Every
reader therefore works under a ``ReadBudget``: uncompressed bytes read, parser tokens,
spoken characters and paragraphs kept, and a deadline, each checked as it is spent, so
that a hostile document is refused (422, in words) within seconds and without growing the
process by more than a bounded amount. The limits are sized from measurements on this
project's machines: ``docs/benchmarks.md``, "Hostile documents".
"""

from __future__ import annotations

import logging
import time
import zipfile
import zlib
from dataclasses import dataclass, field

from lxml import etree

from speechbatch.errors import ValidationError

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# Uncompressed bytes an import reads at most, however the upload is built (the contract).
MAX_CONTENT_BYTES = 100 * MIB
# A Markdown or text file: a job of 5,000 items of 1,500 characters is 7.5 MB of text.
MAX_TEXT_BYTES = 10 * MIB
# markdown-it keeps five integers per line and about 350 bytes per token: these two keep
# a parse under about 150 MB and a few seconds whatever the markup.
MAX_MARKDOWN_LINES = 500_000
MAX_MARKDOWN_TOKENS = 300_000
# Blocks inside blocks (quotes, lists): deeper than any book, shallow enough for the stack.
MAX_NESTING = 20
# What a job can hold: 5,000 items of at most 4,096 characters.
MAX_SPOKEN_CHARACTERS = 5_000 * 4_096
MAX_PARAGRAPHS = 1_000_000
# Reading stops here at the latest; with the split's own bound (a few seconds at worst)
# and storing the items, an import answers within the contract's 10 s.
READ_SECONDS = 4.0
# Checking the clock costs more than a counter: once every so many parser events.
_CLOCK_EVERY = 256


class UnreadableDocument(ValidationError):
    """The file is not a document that can be imported."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="file")


def too_large(what: str, limit: str) -> UnreadableDocument:
    """The refusal of a document past one of the limits above."""
    return UnreadableDocument(
        f"the document is too large to import: {what} (at most {limit}); "
        "split it into several documents"
    )


def size_in_words(size: int) -> str:
    """A byte count in words: ``1.0 GiB``, ``24 MiB``, ``300 KiB``, ``12 bytes``."""
    for unit, scale in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{size} bytes"


@dataclass
class ReadBudget:
    """What one import has left to spend; every ``spend_*`` raises once it runs out."""

    seconds: float = READ_SECONDS
    deadline: float = field(init=False)
    content_bytes: int = 0
    characters: int = 0
    paragraphs: int = 0
    tokens: int = 0
    _events: int = 0

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def spend_bytes(self, n: int) -> None:
        """Count ``n`` uncompressed bytes read."""
        self.content_bytes += n
        if self.content_bytes > MAX_CONTENT_BYTES:
            raise too_large("it unpacks to more than 100 MiB", "100 MiB of content")

    def spend_paragraph(self, text: str) -> None:
        """Count a paragraph of spoken text kept."""
        self.characters += len(text)
        self.paragraphs += 1
        if self.characters > MAX_SPOKEN_CHARACTERS:
            raise too_large(
                f"it has more than {MAX_SPOKEN_CHARACTERS:,} characters of text",
                "what 5,000 items of 4,096 characters hold",
            )
        if self.paragraphs > MAX_PARAGRAPHS:
            raise too_large(
                f"it has more than {MAX_PARAGRAPHS:,} paragraphs", f"{MAX_PARAGRAPHS:,}"
            )

    def check_tokens(self, n: int) -> None:
        """Refuse a parse that has made more than MAX_MARKDOWN_TOKENS tokens."""
        if n > MAX_MARKDOWN_TOKENS:
            raise too_large(
                "its markup is too dense (more than "
                f"{MAX_MARKDOWN_TOKENS:,} elements: list items, emphasis, links, ...)",
                f"{MAX_MARKDOWN_TOKENS:,} elements",
            )

    def tick(self) -> None:
        """One more parser event: check the clock now and then."""
        self._events += 1
        if self._events % _CLOCK_EVERY == 0:
            self.check_clock()

    def check_clock(self) -> None:
        """Refuse once reading has taken longer than READ_SECONDS."""
        if time.monotonic() > self.deadline:
            raise UnreadableDocument(
                f"the document took longer than {self.seconds:g} seconds to read, which "
                "only a very large or unusually built document does; split it into "
                "several documents"
            )


def explain(kind: str, exc: BaseException) -> UnreadableDocument:
    """A parser's failure as a sentence a person understands (the page and the API show
    it as it is): what is wrong with the file, never the program's exception."""
    if isinstance(exc, UnreadableDocument):
        return exc
    name = {"epub": "an EPUB", "md": "a Markdown document", "txt": "a text document"}[kind]
    if isinstance(exc, UnicodeDecodeError):
        return UnreadableDocument("the file is not UTF-8 text")
    if isinstance(exc, zipfile.BadZipFile | zlib.error | EOFError):
        return UnreadableDocument("the file is not a readable EPUB: its ZIP archive is damaged")
    if isinstance(exc, NotImplementedError):
        return UnreadableDocument(
            "the file is not a readable EPUB: it is compressed in a way EPUB readers do not use"
        )
    if isinstance(exc, etree.XMLSyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return UnreadableDocument(
            f"the file is not a readable EPUB: a file inside it is not well-formed XML{where}"
        )
    if isinstance(exc, RecursionError):
        return UnreadableDocument(f"the file is nested too deeply to be read as {name}")
    if isinstance(exc, MemoryError):
        return too_large("reading it needs more memory than an import may take", "300 MB")
    # A case no rule above names: the file could not be read all the same, and the log
    # keeps the details for whoever adds the rule.
    log.warning("reading an upload as %s failed", kind, exc_info=exc)
    return UnreadableDocument(f"the file could not be read as {name}")
