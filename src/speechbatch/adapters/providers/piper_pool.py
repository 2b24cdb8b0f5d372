"""Piper in processes of its own: one per core, each with its voices loaded once.

Why processes: a job's items are threads of one web (or worker) process. Piper's
inference releases the GIL, but its phonemization, the normalization of each sentence
and the MP3 encoding do not, and onnxruntime's default session spreads each inference
over every core while other items' inferences do the same: the cores were shared badly
and the web's own requests waited on the GIL. Here the process that runs the job only
waits for MP3 bytes; each Piper process runs one sentence at a time on one onnxruntime
thread, as ``piper`` itself does fastest on this kind of machine.

The processes are started (``spawn``: never a fork of a threaded server) on the first
call, not at import or app creation. A process that dies (a crash, the OOM killer, a
SIGKILL) breaks the pool: it is replaced by a new one, and the calls it had taken are
sent once more to the new processes; a second break fails the call as retryable, and the
runner's retry policy decides. A Piper process whose parent has gone (the server was
SIGKILLed) notices within half a second and exits, so none is left behind; SIGINT and
SIGTERM are the server's to act on (its graceful stop closes the pool), not the Piper
processes'.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from speechbatch.adapters.providers.base import RetryableProviderError, TimedAudio, timing_of

log = logging.getLogger(__name__)

_ORPHAN_CHECK_SECONDS = 0.5

# In each Piper process: the in-process provider that does the work (see ``_start``).
_speaker: Any = None


def _start(voices_dir: str | None, parent: int) -> None:
    """A Piper process's start: its provider (voices loaded on first use) and its watch."""
    global _speaker
    from speechbatch.adapters.providers.piper import PiperProvider, load_single_threaded

    _speaker = PiperProvider(voices_dir, processes=0, loader=load_single_threaded)
    # A Ctrl-C or a SIGTERM sent to the server's whole process group is for the server:
    # its graceful stop lets in-flight calls finish here, then stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """Exit at once when the process that started this one is gone (it was killed)."""
    stop = threading.Event()
    while not stop.wait(_ORPHAN_CHECK_SECONDS):
        if os.getppid() != parent:
            os._exit(0)


def _speak(
    text: str, voice: str, speed: float | None
) -> tuple[bytes, tuple[dict[str, Any], ...] | None]:
    """In a Piper process: ``text`` spoken as MP3 bytes, with its sentences' timing
    (plain values: a ``TimedAudio`` does not cross a process boundary)."""
    audio: bytes = _speaker.synthesize(text, voice, {"speed": speed} if speed else None)
    return bytes(audio), timing_of(audio)


class PiperPool:
    """``processes`` Piper processes shared by every thread of this process."""

    def __init__(self, processes: int, voices_dir: str | None) -> None:
        self.processes = processes
        self._voices_dir = voices_dir
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _current(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start,
                    initargs=(self._voices_dir, os.getpid()),
                )
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """Drop a broken pool (once, however many callers saw it break)."""
        with self._lock:
            if self._pool is broken:
                self._pool = None
                log.warning("a Piper process ended unexpectedly: starting new ones")
        broken.shutdown(wait=False, cancel_futures=True)

    def speak(self, text: str, voice: str, speed: float | None) -> TimedAudio:
        """``text`` spoken with ``voice`` as MP3 with its timing, made in a Piper process."""
        for _ in range(2):
            pool = self._current()
            try:
                return TimedAudio(*pool.submit(_speak, text, voice, speed).result())
            except BrokenProcessPool:
                self._replace(pool)
        raise RetryableProviderError("the Piper processes ended twice during this call")

    def close(self) -> None:
        """Stop the Piper processes (a later call starts new ones)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
