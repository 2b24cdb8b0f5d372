"""An ID3v2.3 tag for a render's MP3: title, author, narrator, year, cover and chapters.

Written here rather than by mutagen because the order of the frames matters: players and
FFmpeg list ``CHAP`` frames in the order they are stored, and mutagen stores frames by
size (so a book's chapters came out as "Imprint, Colophon, Titlepage, ..."). Here every
chapter's frame follows the one before it in time, under one top-level ordered ``CTOC``.
Version 2.3 because it is what every player reads (and it has ``TYER``); its text is
UTF-16 with a byte order mark, the one Unicode encoding 2.3 knows.
"""

from __future__ import annotations

import struct

from speechbatch.domain.renders import ChapterMark, Tags

_UTF16 = b"\x01"
_NO_OFFSET = 0xFFFFFFFF  # CHAP: "use the times, not byte offsets"
_MAX_CHILDREN = 255  # CTOC counts its entries in one byte
PADDING = 1024


def _text(value: str) -> bytes:
    return _UTF16 + value.encode("utf-16")  # with its byte order mark


def _frame(frame_id: str, data: bytes) -> bytes:
    # 2.3: the size is a plain 32-bit integer (2.4's is synchsafe); no flags.
    return frame_id.encode("ascii") + struct.pack(">IH", len(data), 0) + data


def _text_frame(frame_id: str, value: str) -> bytes:
    return _frame(frame_id, _text(value))


def _picture(data: bytes, mime: str) -> bytes:
    # Latin-1 (for the MIME type and the empty description), picture type 3: front cover.
    return _frame("APIC", b"\x00" + mime.encode("ascii") + b"\x00\x03\x00" + data)


def _toc(element_id: str, children: list[str], top: bool, title: str) -> bytes:
    flags = (0x02 if top else 0) | 0x01  # top-level, ordered
    body = element_id.encode("ascii") + b"\x00" + bytes([flags, len(children)])
    body += b"".join(child.encode("ascii") + b"\x00" for child in children)
    return _frame("CTOC", body + _text_frame("TIT2", title))


def _chapter(element_id: str, chapter: ChapterMark) -> bytes:
    times = struct.pack(
        ">IIII",
        round(chapter.start_seconds * 1000),
        round(chapter.end_seconds * 1000),
        _NO_OFFSET,
        _NO_OFFSET,
    )
    return _frame(
        "CHAP", element_id.encode("ascii") + b"\x00" + times + _text_frame("TIT2", chapter.title)
    )


def _tables_of_contents(ids: list[str]) -> list[bytes]:
    """One ordered top-level CTOC; past 255 chapters, it lists sub-tables of 255 each."""
    if len(ids) <= _MAX_CHILDREN:
        return [_toc("toc", ids, True, "Chapters")]
    groups = [ids[i : i + _MAX_CHILDREN] for i in range(0, len(ids), _MAX_CHILDREN)]
    names = [f"toc{n}" for n in range(len(groups))]
    return [_toc("toc", names, True, "Chapters")] + [
        _toc(
            name, group, False, f"Chapters {n * _MAX_CHILDREN + 1}-{n * _MAX_CHILDREN + len(group)}"
        )
        for n, (name, group) in enumerate(zip(names, groups, strict=True))
    ]


def id3_tag(tags: Tags, chapters: list[ChapterMark]) -> bytes:
    """The whole tag (header, frames in order, padding), to put before the MP3 frames."""
    frames = [_text_frame("TIT2", tags.title), _text_frame("TALB", tags.album)]
    if tags.author:
        frames += [_text_frame("TPE1", tags.author), _text_frame("TPE2", tags.author)]
    if tags.narrator:
        # Audiobook players (Audiobookshelf, Apple Books, Prologue) read the narrator
        # from the composer.
        frames.append(_text_frame("TCOM", tags.narrator))
    if tags.year:
        frames.append(_text_frame("TYER", f"{tags.year:04d}"))
    if tags.track:
        frames.append(_text_frame("TRCK", f"{tags.track[0]}/{tags.track[1]}"))
    frames.append(_text_frame("TCON", "Audiobook"))
    if chapters:
        ids = [f"chp{n:05d}" for n in range(len(chapters))]
        frames += _tables_of_contents(ids)
        frames += [_chapter(i, c) for i, c in zip(ids, chapters, strict=True)]
    if tags.cover and tags.cover_type:
        frames.append(_picture(tags.cover, tags.cover_type))
    body = b"".join(frames) + bytes(PADDING)
    return b"ID3\x03\x00\x00" + _synchsafe(len(body)) + body


def _synchsafe(size: int) -> bytes:
    """The header's size: four bytes of seven bits each."""
    if size >= 1 << 28:
        raise ValueError("an ID3 tag is at most 256 MB")
    return bytes((size >> shift) & 0x7F for shift in (21, 14, 7, 0))
