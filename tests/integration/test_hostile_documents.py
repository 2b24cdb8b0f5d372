"""Hostile and broken documents (issue 42): each import answers 422 within seconds, with a
message in words, and no process grows by more than 300 MB for any upload."""

from __future__ import annotations

import functools
import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.document_bounds import READ_SECONDS
from tests.integration.test_import_api import _import
from tests.support.epubs import (
    CONTAINER,
    PAGE,
    deflated,
    hand_made_epub,
    package,
    raw_zip,
    stored,
    zeros,
)

GIB = 1 << 30
# What a person must never read: a program's exception, a repr of None, a traceback.
PROGRAM_WORDS = re.compile(r"[A-Za-z]+(Error|Exception)\b|NoneType|Traceback|attribute '")
MEMORY_LIMIT_MB = 300
# A refusal happens before the database is involved: one backend is enough for those.
READ_ONLY_ON = pytest.mark.parametrize("backend", ["sqlite"])


@functools.cache
def bomb_image() -> bytes:
    """A 1 MB EPUB whose cover image is a 1 GiB entry of zeros."""
    return hand_made_epub(
        zeros("OEBPS/cover.png", GIB),
        opf=package(
            b'<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
            b'<item id="cover" href="cover.png" media-type="image/png" properties="cover-image"/>'
        ),
    )


def _refused_in_words(resp: Any, fragment: str) -> str:
    assert resp.status_code == 422, resp.get_data(as_text=True)[:500]
    message: str = resp.get_json()["error"]["message"]
    assert fragment in message, message
    assert not PROGRAM_WORDS.search(message), message
    return message


def _markdown_of_24_mib() -> bytes:
    paragraph = b"Lorem *ipsum* dolor sit amet, [consectetur](http://x) adipiscing elit. " * 10
    return (paragraph + b"\n\n") * (24 * 1024 * 1024 // (len(paragraph) + 2))


# The findings of the issue: (file, its bytes, what the answer says, seconds it may take).
FINDINGS: dict[str, tuple[str, Callable[[], bytes], str, float]] = {
    # A 1 MB EPUB whose cover image is a 1 GiB entry of zeros: refused unread.
    "zip bomb": ("bomb.epub", bomb_image, "zip bomb", 2),
    "24 MiB of Markdown": ("big.md", _markdown_of_24_mib, "24 MiB", 3),
    # 1.2 MB that markdown-it scans again and again: refused at the read's deadline.
    "nested brackets": (
        "brackets.md", lambda: b"[" * 600_000 + b"]" * 600_000, "seconds to read",
        READ_SECONDS + 3,
    ),
    # markdown-it would drop what lies deeper than its nesting limit without a word.
    "deep quotes": ("deep.md", lambda: b"> " * 5000 + b"a\n", "nested", 2),
}  # fmt: skip


@READ_ONLY_ON
@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_a_hostile_upload_answers_422_in_words_within_seconds(
    client: FlaskClient, auth: dict[str, str], finding: str
) -> None:
    name, build, fragment, seconds = FINDINGS[finding]
    upload = build()
    start = time.monotonic()
    resp = _import(client, auth, name, upload)
    assert time.monotonic() - start < seconds
    _refused_in_words(resp, fragment)


@READ_ONLY_ON
def test_an_archive_that_unpacks_past_100_mib_answers_422(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # Unreferenced entries of 1 MiB each (too small for the ratio check), 101 MiB in all.
    one = deflated("OEBPS/pad.bin", bytes(range(256)) * 4096)
    upload = hand_made_epub(*(replace(one, name=f"OEBPS/pad{n}.bin") for n in range(101)))
    _refused_in_words(_import(client, auth, "big.epub", upload), "unpacks to 101 MiB")


BAD_EPUBS = {
    "no manifest": hand_made_epub(opf=package(manifest=b"")),
    "no spine": hand_made_epub(opf=package(spine=b"")),
    "package not XML": hand_made_epub(opf=b"<package><manifest></package"),
    "spine page missing": hand_made_epub(
        opf=package(
            b'<item id="c9" href="c9.xhtml" media-type="application/xhtml+xml"/>',
            b'<itemref idref="c9"/>',
        )
    ),
    "no container": raw_zip([stored("mimetype", b"application/epub+zip"), deflated("x", PAGE)]),
    "container without a package": raw_zip(
        [deflated("META-INF/container.xml", CONTAINER.replace(b"rootfile ", b"rootfle "))]
    ),
    "truncated archive": hand_made_epub()[:-30],
    "not a zip": b"PK\x03\x04 broken",
}


@READ_ONLY_ON
@pytest.mark.parametrize("case", sorted(BAD_EPUBS))
def test_a_broken_epub_answers_422_in_words(
    client: FlaskClient, auth: dict[str, str], case: str
) -> None:
    _refused_in_words(_import(client, auth, "bad.epub", BAD_EPUBS[case]), "not a readable EPUB")


def test_an_epub_without_metadata_is_read(client: FlaskClient, auth: dict[str, str]) -> None:
    # ebooklib failed on it ("'NoneType' object has no attribute 'nsmap'"); none is needed.
    resp = _import(client, auth, "bare.epub", hand_made_epub(opf=package(metadata=b"")))
    assert resp.status_code == 201, resp.get_json()
    assert [i["text"] for i in resp.get_json()["items"]] == ["Hello there."]


# --- memory, measured in a process of its own ----------------------------------------

# The package's __init__ builds the whole app (seconds of imports under load); a stand-in
# package lets the reader's own modules load alone. The peak is this image's VmHWM:
# getrusage's maxrss keeps the forking parent's across the exec.
_MEASURE = """
import importlib.util, json, re, sys, time, types
package = types.ModuleType("speechbatch")
package.__path__ = importlib.util.find_spec("speechbatch").submodule_search_locations
sys.modules["speechbatch"] = package
from speechbatch.adapters.documents import read_document
from speechbatch.domain.documents import split_document
from speechbatch.errors import ValidationError
def peak_kib():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
data = open(sys.argv[1], "rb").read()
before = peak_kib()
start = time.monotonic()
try:
    outcome = f"{len(split_document(read_document(sys.argv[2], data, 't'), 1500).items)} items"
except ValidationError as exc:
    outcome = exc.message
peak = peak_kib()
print(json.dumps({"grew_mb": (peak - before) / 1024, "seconds": time.monotonic() - start,
                  "outcome": outcome}))
"""


def _read_in_a_process(tmp_path: Path, name: str, upload: bytes) -> dict[str, Any]:
    path = tmp_path / name
    path.write_bytes(upload)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), name],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _many_short_paragraphs() -> bytes:
    """A page of about a million paragraphs of a few letters (packing no better than text)."""
    letters = random.Random(42).randbytes(8_000_000).translate(b"abcdefg|" * 32)
    paragraphs = letters.replace(b"|", b"</p><p>")
    return hand_made_epub(page=b"<html><body><p>" + paragraphs + b"</p></body></html>")


HEAVY_UPLOADS: dict[str, Callable[[], bytes]] = {
    "bomb.epub": bomb_image,
    # The same bomb as the page itself, which a reader must unpack to read.
    "bomb-page.epub": lambda: raw_zip(
        [
            stored("mimetype", b"application/epub+zip"),
            deflated("META-INF/container.xml", CONTAINER),
            deflated("OEBPS/content.opf", package()),
            zeros("OEBPS/c1.xhtml", GIB),
        ]
    ),
    # 9 MiB of links in one paragraph: a token every 7 bytes.
    "links.md": lambda: b"[a](b) " * (9 * 1024 * 1024 // 7),
    # A million paragraphs in one page of 13 MiB.
    "paragraphs.epub": _many_short_paragraphs,
}


@pytest.mark.parametrize("name", sorted(HEAVY_UPLOADS))
def test_no_upload_grows_a_process_by_300_mb(tmp_path: Path, name: str) -> None:
    figures = _read_in_a_process(tmp_path, name, HEAVY_UPLOADS[name]())
    assert figures["grew_mb"] < MEMORY_LIMIT_MB, figures
    assert figures["seconds"] < 10, figures
    assert not PROGRAM_WORDS.search(figures["outcome"]), figures
