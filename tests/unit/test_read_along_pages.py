"""An imported EPUB's pages made into a read-along's: text found whitespace aside, spans
put around sentences (inside a text node, or around inline elements), what cannot be
wrapped synced coarser, and references the new book cannot follow dropped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from speechbatch.adapters.epub_spans import XHTML
from speechbatch.adapters.read_along import write_read_along
from speechbatch.adapters.read_along_pages import (
    MAX_MISSES,
    BookPage,
    clean_references,
    parse_page,
    sync_pages,
)
from speechbatch.domain.read_along import BookChapter, Passage
from speechbatch.domain.renders import Cue, Tags
from speechbatch.domain.text_locator import Point, TextStream
from tests.support.epubs import build_styled_epub
from tests.support.text_moves import Moved, counting_parser


def _page(name: str, body: str) -> BookPage:
    html = f"<html xmlns='{XHTML}'><head><title>t</title></head><body>{body}</body></html>"
    return parse_page(name, html.encode(), "title")


def _passage(position: int, start: float, *pieces: str) -> Passage:
    cues, at = [], start
    for piece in pieces:
        cues.append(Cue(at, at + 1.0, piece))
        at += 1.0
    return Passage(position, Cue(start, at, " ".join(pieces)), tuple(cues))


def _body(page: BookPage) -> str:
    return etree.tostring(page.body, encoding="unicode").split(">", 1)[1].rsplit("<", 1)[0]


def test_text_is_found_whatever_its_whitespace() -> None:
    stream = TextStream(["It was a ", "bright\n  cold", " day."])
    assert stream.find("was a bright cold", 0) == (2, 16)
    assert stream.find("cold day.", 0) == (12, 20)
    assert stream.find("It was", 3) is None
    assert stream.point(6) == Point(1, 0) and stream.point(12) == Point(1, 9)


def test_sentences_are_wrapped_in_their_node_and_around_inline_elements() -> None:
    page = _page(
        "one.xhtml",
        "<p class='lead'>It was a <em>bright</em> cold day.  The clocks struck.</p>"
        "<p>Winston <b>slipped</b> in.</p>",
    )
    passage = _passage(
        1, 0.0, "It was a bright cold day.", "The clocks struck.", "Winston slipped in."
    )
    placed, firsts = sync_pages([page], [BookChapter("One", [passage])])
    assert _body(page) == (
        '<p class="lead"><span id="speechbatch-item-1-1">It was a <em>bright</em> cold day.'
        '</span>  <span id="speechbatch-item-1-2">The clocks struck.</span></p>'
        '<p><span id="speechbatch-item-1-3">Winston <b>slipped</b> in.</span></p>'
    )
    assert [(p.clip.anchor, p.clip.begin, p.clip.end) for p in placed] == [
        ("speechbatch-item-1-1", 0, 1000),
        ("speechbatch-item-1-2", 1000, 2000),
        ("speechbatch-item-1-3", 2000, 3000),
    ]
    assert [(title, p.clip.anchor) for title, p in firsts] == [("One", "speechbatch-item-1-1")]


def test_a_piece_that_cannot_be_wrapped_is_heard_with_the_one_before() -> None:
    # The second sentence starts inside the emphasis and ends outside it: its clip goes
    # to the first, whose highlight lasts until the third's begins.
    page = _page("one.xhtml", "<p><em>One. Two</em> three. Four.</p>")
    passage = _passage(1, 0.0, "One.", "Two three.", "Four.")
    placed, _ = sync_pages([page], [BookChapter("One", [passage])])
    assert [(p.clip.anchor, p.clip.begin, p.clip.end) for p in placed] == [
        ("speechbatch-item-1-1", 0, 2000),
        ("speechbatch-item-1-3", 2000, 3000),
    ]


def test_pieces_before_the_first_wrapped_one_are_heard_with_it() -> None:
    page = _page("one.xhtml", "<p>First one. <em>Go Second</em> one ends. Third one.</p>")
    passage = _passage(1, 0.0, "First one. Go", "Second one", "ends. Third one.")
    placed, _ = sync_pages([page], [BookChapter("One", [passage])])
    assert [(p.clip.anchor, p.clip.begin, p.clip.end) for p in placed] == [
        ("speechbatch-item-1-3", 0, 3000),
    ]


def test_an_item_whose_pieces_cross_blocks_is_synced_at_its_block() -> None:
    page = _page("one.xhtml", "<div><p>Half a</p><p>sentence.</p></div><p id='own'>Next.</p>")
    across = _passage(1, 0.0, "Half a sentence.")
    placed, _ = sync_pages([page], [BookChapter("One", [across, _passage(2, 1.0, "Next.")])])
    assert [(p.clip.anchor, p.clip.begin, p.clip.end) for p in placed] == [
        ("speechbatch-item-1", 0, 1000),
        ("speechbatch-item-2-1", 1000, 2000),
    ]
    assert page.body.find(f"{{{XHTML}}}div/{{{XHTML}}}p").get("id") == "speechbatch-item-1"


def test_an_item_not_in_the_book_is_left_unsynced_and_the_next_is_found() -> None:
    pages = [_page("one.xhtml", "<p>Alpha.</p>"), _page("two.xhtml", "<p>Gamma.</p>")]
    chapters = [
        BookChapter("One", [_passage(1, 0.0, "Alpha."), _passage(2, 1.0, "Edited away.")]),
        BookChapter("Two", [_passage(3, 2.0, "Gamma.")]),
    ]
    placed, firsts = sync_pages(pages, chapters)
    assert [(p.page, p.clip.anchor) for p in placed] == [
        (0, "speechbatch-item-1-1"),
        (1, "speechbatch-item-3-1"),
    ]
    assert [title for title, _ in firsts] == ["One", "Two"]


def test_references_the_new_book_cannot_follow_are_dropped() -> None:
    page = _page(
        "text/one.xhtml",
        "<p id='here'>A <a href='#here'>kept</a> <a href='#gone'>lost</a> "
        "<a href='notes.xhtml'>away</a> <a href='https://example.org/'>out</a>"
        "<img src='../images/a.png' alt=''/>after <img src='missing.png' alt=''/>tail"
        "<script>x = 1</script> end.</p>",
    )
    clean_references([page], {"text/one.xhtml", "images/a.png"})
    assert _body(page) == (
        '<p id="here">A <a href="#here">kept</a> <a>lost</a> <a>away</a> '
        '<a href="https://example.org/">out</a><img src="../images/a.png" alt=""/>after '
        "tail end.</p>"
    )


def test_a_page_that_is_not_xhtml_becomes_an_empty_one() -> None:
    page = parse_page("bad.xhtml", b"\x00not xml at all", "Its title")
    assert page.root.tag == f"{{{XHTML}}}html"
    assert page.root.findtext(f"{{{XHTML}}}head/{{{XHTML}}}title") == "Its title"
    assert list(page.body) == []


def test_a_sentence_that_opens_or_closes_with_an_inline_element_is_wrapped_whole() -> None:
    page = _page(
        "one.xhtml",
        "<p><i>Ulysses</i> was long. It ended with <em>yes</em> <b>and</b> <em>yes.</em> Then.</p>",
    )
    passage = _passage(1, 0.0, "Ulysses was long.", "It ended with yes and yes.", "Then.")
    placed, _ = sync_pages([page], [BookChapter("One", [passage])])
    assert _body(page) == (
        '<p><span id="speechbatch-item-1-1"><i>Ulysses</i> was long.</span> '
        '<span id="speechbatch-item-1-2">It ended with <em>yes</em> <b>and</b> <em>yes.</em>'
        '</span> <span id="speechbatch-item-1-3">Then.</span></p>'
    )
    assert len(placed) == 3


def _chapters() -> list[BookChapter]:
    return [BookChapter("One", [_passage(1, 0.0, "It was a bright cold day in April.")])]


def test_a_source_that_cannot_be_read_makes_the_plain_book(tmp_path: Path) -> None:
    audio = tmp_path / "book.mp3"
    audio.write_bytes(b"ID3")
    path = tmp_path / "book.epub"
    write_read_along(path, audio, Tags("T", "T"), 1, _chapters(), source=b"not an EPUB")
    with zipfile.ZipFile(path) as epub:
        assert "EPUB/chapter-001.xhtml" in epub.namelist()


def test_a_lost_lease_stops_the_book_instead_of_making_a_plain_one(tmp_path: Path) -> None:
    class Lost(Exception):
        pass

    def renew() -> None:
        raise Lost

    audio = tmp_path / "book.mp3"
    audio.write_bytes(b"ID3")
    source = build_styled_epub()
    with pytest.raises(Lost):
        write_read_along(tmp_path / "b.epub", audio, Tags("T", "T"), 1, _chapters(), source, renew)


XHTML_11 = (
    '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
    '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n'
)


def test_named_entities_of_an_epub_2_page_become_their_characters() -> None:
    # The DTD is not loaded, so the parser keeps ``&nbsp;`` as an entity reference; the
    # page is written without its DOCTYPE, where a reference left would not be XML.
    page = parse_page(
        "one.xhtml",
        (
            f"{XHTML_11}<html xmlns='{XHTML}'><head><title>t</title></head><body>"
            "<p>One&nbsp;two &amp; three&#160;four.</p>"
            "<p>&hellip;So <b>it</b>&eacute;t&eacute;&notanentity; went&rarr;.</p>"
            "</body></html>"
        ).encode(),
        "title",
    )
    written = etree.tostring(page.root, xml_declaration=True, encoding="utf-8")
    strict = ET.fromstring(written)  # the standard library's parser: no recovery
    texts = ["".join(p.itertext()) for p in strict.iter(f"{{{XHTML}}}p")]
    assert texts == ["One\u00a0two & three\u00a0four.", "\u2026So it\u00e9t\u00e9 went\u2192."]
    placed, _ = sync_pages([page], [BookChapter("One", [_passage(1, 0.0, "One two & three")])])
    assert [p.clip.anchor for p in placed] == ["speechbatch-item-1-1"]


def test_an_entity_the_page_declares_itself_is_dropped_not_resolved() -> None:
    page = parse_page(
        "one.xhtml",
        (
            '<!DOCTYPE html [<!ENTITY a "zzz"><!ENTITY x SYSTEM "file:///etc/passwd">]>'
            f"<html xmlns='{XHTML}'><head><title>t</title></head>"
            "<body><p>x &a; y &x; z</p></body></html>"
        ).encode(),
        "title",
    )
    strict = ET.fromstring(etree.tostring(page.root))
    assert ["".join(p.itertext()) for p in strict.iter(f"{{{XHTML}}}p")] == ["x  y  z"]


def _characters_moved(sentences: int) -> int:
    """Characters moved in and out of text nodes to sync a page of one paragraph whose
    every sentence crosses an <i>."""
    body = "<p>" + "".join(f"<i>w{k}</i>x. " for k in range(sentences)) + "</p>"
    html = f"<html xmlns='{XHTML}'><head><title>t</title></head><body>{body}</body></html>"
    passages = [
        _passage(n + 1, float(start), *(f"w{k}x." for k in range(start, start + 400)))
        for n, start in enumerate(range(0, sentences, 400))
    ]
    with counting_parser() as parser:
        page = BookPage("one.xhtml", etree.fromstring(html.encode(), parser))
        Moved.count = 0
        placed, _ = sync_pages([page], [BookChapter("One", passages)])
    assert len(placed) == sentences
    spans = page.body.findall(f"{{{XHTML}}}p/{{{XHTML}}}span")
    assert len(spans) == sentences and spans[-1].find(f"{{{XHTML}}}i").text == f"w{sentences - 1}"
    return Moved.count


def test_wrapping_many_sentences_around_inline_elements_of_one_paragraph_is_linear() -> None:
    small, large = _characters_moved(2_000), _characters_moved(4_000)  # whole items of 400
    assert large <= 2.2 * small, (small, large)  # twice the sentences, not four times


def test_after_many_passages_in_a_row_are_not_found_the_rest_are_not_sought() -> None:
    def chapters(missing: int) -> list[BookChapter]:
        edited = [_passage(2 + n, 1.0 + n, f"Edited away {n}.") for n in range(missing)]
        found = [_passage(1, 0.0, "Alpha."), *edited]
        return [BookChapter("One", found), BookChapter("Two", [_passage(99, 99.0, "Gamma.")])]

    ticks: list[int] = []
    pages = [_page("one.xhtml", "<p>Alpha.</p>"), _page("two.xhtml", "<p>Gamma.</p>")]
    placed, _ = sync_pages(pages, chapters(MAX_MISSES - 1), lambda: ticks.append(1))
    assert [p.clip.anchor for p in placed][-1] == "speechbatch-item-99-1"
    assert len(ticks) == MAX_MISSES + 1  # the lease is renewed passage by passage
    pages = [_page("one.xhtml", "<p>Alpha.</p>"), _page("two.xhtml", "<p>Gamma.</p>")]
    placed, firsts = sync_pages(pages, chapters(MAX_MISSES))
    assert [p.clip.anchor for p in placed] == ["speechbatch-item-1-1"]
    assert [title for title, _ in firsts] == ["One"]
