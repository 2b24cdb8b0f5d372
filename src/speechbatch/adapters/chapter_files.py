"""A render's chapter files, read out of its stored ZIP (the acx preset's): their sizes,
and one of them as a seekable stream, so a feed can publish each as an episode."""

from __future__ import annotations

import io
import shutil
import tempfile
import zipfile
from contextlib import closing
from typing import IO, BinaryIO

# A ZIP streamed from a bucket is spooled to be read from its end (its directory);
# past this size the spool goes to a temporary file on disk.
SPOOL_IN_MEMORY = 8 * 1024 * 1024


def _seekable(source: BinaryIO) -> IO[bytes]:
    """``source`` itself when it can seek (a file of the folder store), else a spooled
    copy (an object streamed from a bucket); ``source`` is closed in that case."""
    if source.seekable():
        return source
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 (returned to the caller)
    with source:
        shutil.copyfileobj(source, spool)
    spool.seek(0)
    return spool


def chapter_sizes(source: BinaryIO) -> list[int]:
    """The length in bytes of each chapter file of the ZIP, in chapter order (the order
    they were written); ``source`` is closed."""
    with closing(_seekable(source)) as seekable, zipfile.ZipFile(seekable) as archive:
        return [info.file_size for info in archive.infolist()]


class ChapterFile(io.RawIOBase):
    """One member of the ZIP, readable and seekable; closing it closes the archive and
    the stored file under it. ``size`` is its length."""

    def __init__(self, source: IO[bytes], archive: zipfile.ZipFile, info: zipfile.ZipInfo):
        self._source = source
        self._archive = archive
        self._member = archive.open(info)
        self.size = info.file_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._member.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._member.seek(offset, whence)

    def tell(self) -> int:
        return self._member.tell()

    def close(self) -> None:
        if not self.closed:
            self._member.close()
            self._archive.close()
            self._source.close()
        super().close()


def open_chapter_file(source: BinaryIO, number: int) -> ChapterFile | None:
    """The ``number``-th chapter file (from 1) of the ZIP, or None when it has fewer
    (``source`` is then closed)."""
    seekable = _seekable(source)
    archive = zipfile.ZipFile(seekable)
    members = archive.infolist()
    if not 1 <= number <= len(members):
        archive.close()
        seekable.close()
        return None
    return ChapterFile(seekable, archive, members[number - 1])
