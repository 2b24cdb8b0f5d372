"""Imports under random input (issue 42): whatever the nesting, the size or the archive, a
read gives sections whose items join back to their spoken text, or refuses in words;
never another exception, and never much past its deadline."""

from __future__ import annotations

import time
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from speechbatch.adapters.documents import UnreadableDocument, read_document
from speechbatch.domain.documents import split_document, spoken_text
from tests.integration.test_hostile_documents import PROGRAM_WORDS
from tests.support.epubs import (
    CONTAINER,
    METADATA,
    PAGE,
    Entry,
    deflated,
    package,
    raw_zip,
    stored,
)

READ_SECONDS = 1.0
# The clock is checked every few hundred parser events, and the machine is shared.
SLACK_SECONDS = 2.0
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _read_or_refuse(name: str, data: bytes) -> None:
    start = time.monotonic()
    try:
        sections = read_document(name, data, "T", read_seconds=READ_SECONDS)
    except UnreadableDocument as exc:
        assert not PROGRAM_WORDS.search(exc.message), exc.message
        event(f"refused: {exc.message.split(':')[-1][:40]}")
        return
    finally:
        assert time.monotonic() - start < READ_SECONDS + SLACK_SECONDS
    event("read")
    split = split_document(sections, 200)
    # Up to whitespace: a word longer than an item is the one thing cut inside.
    joined = " ".join(item.text for item in split.items)
    assert "".join(joined.split()) == "".join(spoken_text(sections).split())
    assert all(len(item.text) <= 200 for item in split.items)


# --- Markdown: random inline markup inside random block nesting, repeated ------------

_INLINE = st.sampled_from(
    ["word", "Dr. Who.", " ", "*", "**", "_", "[", "]", "(", ")", "](x)", "`", "<b>", "!",
     "\\", "&amp;", "#", "|", "http://a.b", "\n"]
)  # fmt: skip
_TEXT = st.lists(_INLINE, min_size=1, max_size=25).map("".join)


def _quoted(block: str) -> str:
    return "> " + block.replace("\n", "\n> ")


def _listed(blocks: list[str]) -> str:
    return "\n".join("- " + b.replace("\n", "\n  ") for b in blocks)


def _nested(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        children.map(_quoted),
        st.lists(children, min_size=1, max_size=4).map(_listed),
        st.lists(children, min_size=1, max_size=4).map("\n\n".join),
        children.map(lambda b: "# " + b.replace("\n", " ")),
        children.map(lambda b: "```\n" + b + "\n```"),
    )


_MARKDOWN = st.recursive(_TEXT, _nested, max_leaves=40)


@PROPERTY
@given(markdown=_MARKDOWN, times=st.sampled_from([1, 2, 50, 2_000]))
def test_markdown_of_any_nesting_and_size_is_read_or_refused_in_words(
    markdown: str, times: int
) -> None:
    _read_or_refuse("doc.md", ((markdown + "\n\n") * times).encode())


@PROPERTY
@given(text=_TEXT, times=st.integers(1, 2_000))
def test_text_of_any_size_is_read_or_refused_in_words(text: str, times: int) -> None:
    _read_or_refuse("doc.txt", (text * times).encode())


# --- EPUB: random archives of broken, missing, lying or unusual entries ---------------

_PAGES = st.sampled_from(
    [PAGE, b"", b"<p>unclosed <b>bold", b"\xff\xfe\x00\x01", b"<html><body>" + b"<div>" * 300,
     b"<?xml version='1.0'?><!DOCTYPE x [<!ENTITY a 'aaaa'>]><p>&a;&a;</p>",
     b"<p>" + "caf\u00e9 na\u00efve".encode() + b"</p>"]
)  # fmt: skip
_ITEMS = st.sampled_from(
    [b'<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>',
     b'<item id="c1" href="../../c1.xhtml" media-type="application/xhtml+xml"/>',
     b'<item id="c1" href="c%31.xhtml" media-type="application/xhtml+xml"/>',
     b'<item id="c1" href="c1.xhtml" media-type="image/png"/>',
     b'<item id="nav" href="c1.xhtml" media-type="application/xhtml+xml" properties="nav"/>',
     b'<item id="ncx" href="c1.xhtml" media-type="application/x-dtbncx+xml"/>', b"<item/>", b""]
)  # fmt: skip
_SPINES = st.sampled_from(
    [b'<itemref idref="c1"/>', b'<itemref idref="c1"/><itemref idref="c1"/>', b"<itemref/>",
     b'<itemref idref="nav"/>', b""]
)  # fmt: skip
_PACKAGES = st.one_of(
    st.builds(
        package,
        manifest=st.lists(_ITEMS, min_size=1, max_size=3).map(b"".join),
        spine=_SPINES,
    ),
    st.builds(
        package,
        manifest=st.lists(_ITEMS, max_size=3).map(b"".join),
        spine=_SPINES,
        metadata=st.sampled_from([METADATA, b""]),
    ),
    st.binary(max_size=200),
)
_CONTAINERS = st.sampled_from(
    [CONTAINER] * 6
    + [CONTAINER.replace(b"OEBPS/content.opf", b"nowhere.opf"), b"<container/>", b"not xml",
       CONTAINER.replace(b'full-path="', b'full-path="/')]
)  # fmt: skip


@st.composite
def _archives(draw: st.DrawFn) -> bytes:
    entries = [
        draw(st.sampled_from([stored, deflated]))(name, content)
        for name, content in [
            ("mimetype", b"application/epub+zip"),
            ("META-INF/container.xml", draw(_CONTAINERS)),
            ("OEBPS/content.opf", draw(_PACKAGES)),
            ("OEBPS/c1.xhtml", draw(_PAGES)),
        ]
    ]
    # Now and then an entry is missing, or its directory lies about its size, or the
    # archive is cut short; most archives are whole, so that most reach the package.
    entries = [e for e in entries if draw(st.integers(0, 15))]
    lied: list[Entry] = [
        replace(e, size=draw(st.sampled_from([e.size] * 12 + [0, e.size + 1, 1 << 20])))
        for e in entries
    ]
    archive = raw_zip(lied)
    return archive[: len(archive) - draw(st.sampled_from([0] * 12 + [1, 22, 60]))]


@PROPERTY
@given(archive=_archives())
def test_any_archive_is_read_or_refused_in_words(archive: bytes) -> None:
    _read_or_refuse("book.epub", archive)


@PROPERTY
@given(data=st.binary(max_size=3000), name=st.sampled_from(["a.epub", "a.md", "a.txt", "a"]))
def test_any_bytes_are_read_or_refused_in_words(data: bytes, name: str) -> None:
    _read_or_refuse(name, data)
