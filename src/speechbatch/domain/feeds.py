"""A podcast feed as XML: RSS 2.0 with the iTunes and Podcasting 2.0 namespaces, built with
ElementTree (text is escaped by the serializer, never glued into markup). No I/O."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime
from typing import Any

ITUNES = "http://www.itunes.com/dtds/podcast-1.0.dtd"
PODCAST = "https://podcastindex.org/namespace/1.0"
FEED_TYPE = "application/rss+xml"
CHAPTERS_TYPE = "application/json+chapters"
TRANSCRIPT_TYPE = "text/vtt"
# The JSON chapters format's version (Podcasting 2.0, "jsonChapters.md").
CHAPTERS_VERSION = "1.2.0"

ET.register_namespace("itunes", ITUNES)
ET.register_namespace("podcast", PODCAST)


@dataclass(frozen=True)
class Episode:
    """One item of the feed: an audio file and what describes it."""

    guid: str  # never reused: a new render is a new episode
    title: str
    url: str
    length: int  # bytes
    type: str  # the audio's content type
    seconds: float
    published: datetime
    chapters_url: str | None = None
    transcript_url: str | None = None
    number: int | None = None


@dataclass(frozen=True)
class Channel:
    """The feed itself: the job as a show."""

    title: str
    link: str
    author: str | None
    description: str
    image_url: str | None
    episodes: list[Episode]


def duration(seconds: float) -> str:
    """``itunes:duration`` as H:MM:SS."""
    whole = max(0, round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _text(parent: ET.Element, tag: str, text: str, **attributes: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attributes)
    element.text = text
    return element


def _episode(channel: ET.Element, episode: Episode, author: str | None) -> None:
    item = ET.SubElement(channel, "item")
    _text(item, "title", episode.title)
    _text(item, "guid", episode.guid, isPermaLink="false")
    _text(item, "pubDate", format_datetime(episode.published, usegmt=True))
    ET.SubElement(item, "enclosure", url=episode.url, length=str(episode.length), type=episode.type)
    _text(item, f"{{{ITUNES}}}duration", duration(episode.seconds))
    if author:
        _text(item, f"{{{ITUNES}}}author", author)
    if episode.number is not None:
        _text(item, f"{{{ITUNES}}}episode", str(episode.number))
    if episode.chapters_url:
        ET.SubElement(item, f"{{{PODCAST}}}chapters", url=episode.chapters_url, type=CHAPTERS_TYPE)
    if episode.transcript_url:
        ET.SubElement(
            item, f"{{{PODCAST}}}transcript", url=episode.transcript_url, type=TRANSCRIPT_TYPE
        )


def feed_xml(show: Channel) -> bytes:
    """The feed's document (UTF-8, with its XML declaration)."""
    rss = ET.Element("rss", version="2.0")
    channel = ET.SubElement(rss, "channel")
    _text(channel, "title", show.title)
    _text(channel, "link", show.link)
    _text(channel, "description", show.description)
    _text(channel, f"{{{ITUNES}}}type", "serial")
    _text(channel, f"{{{ITUNES}}}explicit", "false")
    if show.author:
        _text(channel, f"{{{ITUNES}}}author", show.author)
    if show.image_url:
        ET.SubElement(channel, f"{{{ITUNES}}}image", href=show.image_url)
    for episode in show.episodes:
        _episode(channel, episode, show.author)
    return ET.tostring(rss, encoding="utf-8", xml_declaration=True)


def json_chapters(chapters: list[dict[str, Any]]) -> dict[str, Any]:
    """A render's chapters (``title``, ``start_seconds``, ``end_seconds``) in the
    Podcasting 2.0 JSON chapters format."""
    return {
        "version": CHAPTERS_VERSION,
        "chapters": [
            {
                "startTime": chapter["start_seconds"],
                "endTime": chapter["end_seconds"],
                "title": chapter["title"],
            }
            for chapter in chapters
        ],
    }


_TIMING = re.compile(r"^(\d+):(\d\d):(\d\d)\.(\d{3}) --> (\d+):(\d\d):(\d\d)\.(\d{3})")


def _seconds(h: str, m: str, s: str, ms: str) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def _stamp(seconds: float) -> str:
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def chapter_transcript(vtt: str, start: float, end: float, offset: float) -> str:
    """The cues of a render's WebVTT that begin in [``start``, ``end``), moved by
    ``offset`` seconds (a chapter file's own time: its room tone, then the chapter) and
    numbered again from 1; their text lines are kept as they are (already escaped)."""
    kept: list[str] = []
    for block in vtt.split("\n\n"):
        lines = [line for line in block.split("\n") if line]
        timing = next((n for n, line in enumerate(lines) if _TIMING.match(line)), None)
        if timing is None:
            continue
        found = _TIMING.match(lines[timing])
        assert found is not None
        begin, finish = _seconds(*found.groups()[:4]), _seconds(*found.groups()[4:])
        if start - 0.0005 <= begin < end - 0.0005:
            stamps = f"{_stamp(begin + offset)} --> {_stamp(finish + offset)}"
            kept.append("\n".join([str(len(kept) + 1), stamps, *lines[timing + 1 :]]))
    return "WEBVTT\n\n" + "".join(cue + "\n\n" for cue in kept)
