"""The feed's and the read-along book's documents, pure: what ElementTree writes, and
the small rules around it (durations, a chapter's transcript, a voice's language)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from speechbatch.domain import feeds, read_along
from speechbatch.domain.renders import Cue

WHOLE = (
    "WEBVTT\n\n"
    "1\n00:00:00.000 --> 00:00:01.500\nChapter one.\n\n"
    "2\n00:00:01.900 --> 00:00:04.250\nA cue of two lines,\n&amp; its second line.\n\n"
    "3\n00:00:05.750 --> 00:00:07.000\nChapter two.\n\n"
)


def test_a_chapters_transcript_keeps_its_cues_and_moves_them_to_the_files_time() -> None:
    second = feeds.chapter_transcript(WHOLE, 5.75, 7.0, 0.6 - 5.75)
    assert second == "WEBVTT\n\n1\n00:00:00.600 --> 00:00:01.850\nChapter two.\n\n"
    first = feeds.chapter_transcript(WHOLE, 0.0, 5.75, 0.6)
    assert first.count(" --> ") == 2
    assert "2\n00:00:02.500 --> 00:00:04.850\nA cue of two lines,\n&amp; its second line.\n\n" in (
        first
    )


def test_feed_text_is_escaped_by_the_serializer_and_namespaced() -> None:
    episode = feeds.Episode(
        guid="render-1", title="<b>Bold</b> & more", url="http://h/a.mp3?x=1&y=2", length=10,
        type="audio/mpeg", seconds=3725.4, published=datetime(2026, 12, 5, tzinfo=UTC),
        transcript_url="http://h/t.vtt",
    )  # fmt: skip
    show = feeds.Channel("T & <T>", "http://h/", "A <b>", "d", None, [episode])
    root = ET.fromstring(feeds.feed_xml(show))
    item = root.find("channel/item")
    assert item is not None and item.findtext("title") == "<b>Bold</b> & more"
    enclosure = item.find("enclosure")
    assert enclosure is not None and enclosure.get("url") == "http://h/a.mp3?x=1&y=2"
    assert item.findtext(f"{{{feeds.ITUNES}}}duration") == "1:02:05"
    assert item.find(f"{{{feeds.PODCAST}}}chapters") is None
    assert root.findtext(f"channel/{{{feeds.ITUNES}}}author") == "A <b>"


def test_book_durations_add_up_to_the_millisecond() -> None:
    chapters = [
        read_along.BookChapter("One", [read_along.Passage(1, Cue(0.0, 1.0006, "a"))]),
        read_along.BookChapter("Two", [read_along.Passage(2, Cue(1.4, 2.9999, "b & c"))]),
    ]
    info = read_along.BookInfo(
        "urn:uuid:x", "T", None, None, "en", "2026-12-05T00:00:00Z", None, None
    )
    package = ET.fromstring(read_along.package_opf(info, chapters))
    durations = [
        e.text or "" for e in package.iter(f"{{{read_along.OPF}}}meta")
        if e.get("property") == "media:duration"
    ]  # fmt: skip
    assert durations == ["0:00:01.001", "0:00:01.600", "0:00:02.601"]
    page = ET.fromstring(read_along.chapter_xhtml(chapters[1], "en"))
    assert page.tag == f"{{{read_along.XHTML}}}html"
    (paragraph,) = page.iter(f"{{{read_along.XHTML}}}p")
    assert (paragraph.get("id"), paragraph.text) == ("item-2", "b & c")


def test_a_books_language_comes_from_its_voice() -> None:
    voices = ["alloy", "ash", "en-us", "de", "en_US-joe-medium", "piper:de_DE-thorsten-low"]
    assert [read_along.language_of(v) for v in voices] == [
        "en", "en", "en-US", "de", "en-US", "de-DE",
    ]  # fmt: skip


def test_each_sentence_or_word_is_its_own_span_and_clip_and_the_clips_tile_the_item() -> None:
    words = (Cue(1.2, 1.5, "Hello,"), Cue(1.6, 2.0, "you"), Cue(1.6, 2.0, "two"),
             Cue(2.3, 2.9, "there."))  # fmt: skip
    passage = read_along.Passage(3, Cue(1.0, 3.2, "Hello, you two there."), words)
    clips = [(c.anchor, c.text, c.begin, c.end) for c in passage.clips()]
    assert clips == [
        ("item-3-1", "Hello,", 1000, 1600), ("item-3-2", "you", 1600, 1600),
        ("item-3-3", "two", 1600, 2300), ("item-3-4", "there.", 2300, 3200),
    ]  # fmt: skip
    chapter = read_along.BookChapter("One", [passage])
    assert chapter.milliseconds == 2200
    page = ET.fromstring(read_along.chapter_xhtml(chapter, "en"))
    (paragraph,) = page.iter(f"{{{read_along.XHTML}}}p")
    assert paragraph.get("id") == "item-3"
    assert "".join(paragraph.itertext()) == "Hello, you two there."
    smil = ET.fromstring(read_along.chapter_smil(0, chapter))
    pars = [
        (
            par.find(f"{{{read_along.SMIL}}}text").get("src"),  # type: ignore[union-attr]
            par.find(f"{{{read_along.SMIL}}}audio").get("clipBegin"),  # type: ignore[union-attr]
        )
        for par in smil.iter(f"{{{read_along.SMIL}}}par")
    ]
    # The word timed at the same moment as the next has its span but no clip of no time.
    assert pars == [
        ("chapter-001.xhtml#item-3-1", "0:00:01.000"),
        ("chapter-001.xhtml#item-3-3", "0:00:01.600"),
        ("chapter-001.xhtml#item-3-4", "0:00:02.300"),
    ]
