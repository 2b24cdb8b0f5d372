"""The documents this process answered lately, by job, variant and version.

A job's version names its answer: every write of the job row bumps it, and nothing else
shows in the answer (see ``JobHead.etag``). That is what makes a 304 correct, and it
makes a document built once for a version good for every later poll of that version,
by anyone allowed to read the job (the poll's statement still checks who asks, and
reads the version, every time). So a poll tells the database the version this process
holds, the database answers "still that one" without building the JSON again, and the
document comes from here: a full read of an unchanged job costs what a 304 costs, plus
sending the bytes. Jobs are never deleted, so an id never names another job.

Only the database's part is kept (the lease is spliced in per answer from the head).
Bounded by size, least recently used first out; one per app (one database).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_CHARACTERS = 32 * 1024 * 1024


@dataclass(frozen=True)
class Document:
    """One answer's JSON text as the database built it for ``version``."""

    version: int
    text: str


class DocumentCache:
    """Per (job, variant): the newest document built, within ``max_characters`` in all."""

    def __init__(self, max_characters: int = DEFAULT_MAX_CHARACTERS) -> None:
        self.max_characters = max_characters
        self._documents: OrderedDict[tuple[int, str], Document] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, job_id: int, variant: str) -> Document | None:
        """The document kept for this job and variant, whatever its version."""
        with self._lock:
            document = self._documents.get((job_id, variant))
            if document is not None:
                self._documents.move_to_end((job_id, variant))
            return document

    def hit(self) -> None:
        """Count an answer served from here (for tests and benchmarks)."""
        with self._lock:
            self.hits += 1

    def put(self, job_id: int, variant: str, version: int, text: str) -> None:
        """Keep ``text`` as the job's document of ``version`` (an older one is replaced;
        a document of more than a quarter of the bound is not kept)."""
        if len(text) > self.max_characters // 4:
            return
        key = (job_id, variant)
        with self._lock:
            kept = self._documents.get(key)
            if kept is not None:
                if kept.version > version:  # a slower reader built an older version
                    return
                self._size -= len(kept.text)
            self._documents[key] = Document(version, text)
            self._documents.move_to_end(key)
            self._size += len(text)
            while self._size > self.max_characters:
                _, evicted = self._documents.popitem(last=False)
                self._size -= len(evicted.text)

    def __len__(self) -> int:
        with self._lock:
            return len(self._documents)
