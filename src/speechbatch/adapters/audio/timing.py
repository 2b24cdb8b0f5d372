"""Timing measured from a take's audio, for providers that give none.

English: the words by forced alignment with pocketsphinx (its US English model ships in
the package): the text's words are aligned to the audio, each gets its start and end,
and each sentence runs from its first word to its last. Words the model's dictionary
lacks (numbers, names) take the time between their neighbours. Other languages, or
when alignment fails: stretches of speech between silences, matched to the sentences by
their lengths (``domain.timing.sentences_from_speech``).

Decoders are slow to load (a third of a second), hold about 30 MB each and are not safe
to share between threads at once: at most MAX_DECODERS are made per process, kept, and
lent out one thread at a time. pocketsphinx releases the GIL while it decodes, so the
other lanes keep sending.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import av
import numpy as np
import numpy.typing as npt

from speechbatch.adapters.audio.pcm import decode
from speechbatch.domain.timing import (
    Span,
    Timing,
    language_of,
    sentences_from_speech,
    sentences_from_words,
    sentences_of,
)

log = logging.getLogger(__name__)

ALIGN_RATE = 16000  # the acoustic model's rate
_FRAME = 0.01  # pocketsphinx's frames, and the silence detector's
# Alignment is trusted only when most words are in the dictionary.
_KNOWN_SHARE = 0.6
# A silence is this far below the loudest frame, and at least this long between sentences.
_SILENCE_DB = -35.0
_MIN_PAUSE = 0.12

# A decoder holds about 30 MB (the model and its dictionary), and aligning takes about a
# hundredth of the audio's length: a thread that finds both in use waits for one.
MAX_DECODERS = 2
_decoders: list[Any] = []
_decoders_lock = threading.Lock()
_decoder_slots = threading.BoundedSemaphore(MAX_DECODERS)


@contextmanager
def _decoder() -> Iterator[Any]:
    """A decoder for this thread alone, returned to the pool afterwards."""
    with _decoder_slots:
        with _decoders_lock:
            decoder = _decoders.pop() if _decoders else None
        if decoder is None:
            from pocketsphinx import Decoder

            decoder = Decoder(lm=None, loglevel="FATAL")
        try:
            yield decoder
        finally:
            with _decoders_lock:
                _decoders.append(decoder)


def measure_timing(
    audio: bytes, text: str, voice: str, given: Timing | None = None
) -> Timing | None:
    """The timing of ``text`` as spoken in ``audio`` by ``voice``: by word where the
    alignment can, else ``given`` (a provider's sentences), else by sentence from the
    silences (None when the audio cannot be decoded or the text has no sentence)."""
    texts = sentences_of(text)
    if not texts:
        return None
    try:
        pcm = np.concatenate([np.zeros(0, np.float32), *decode(io.BytesIO(audio), ALIGN_RATE)])
    except (av.FFmpegError, IndexError, ValueError) as exc:
        log.warning("could not decode audio to time it: %s", exc)
        return None
    if language_of(voice) in (None, "en"):
        words = align_words(pcm, " ".join(texts))
        if words is not None:
            return Timing(sentences_from_words(texts, words), words)
    if given is not None:
        return given
    return Timing(sentences_from_speech(texts, speech_stretches(pcm, ALIGN_RATE)))


def _dictionary_form(word: str) -> str:
    return re.sub(r"[^a-z']", "", word.lower().replace("\u2019", "'")).strip("'")


def align_words(pcm: npt.NDArray[np.float32], text: str) -> tuple[Span, ...] | None:
    """Each word of ``text`` (split at whitespace) with its span in ``pcm`` (16 kHz), or
    None when too few words are in the dictionary or the alignment did not finish."""
    tokens = text.split()
    if not tokens or pcm.size == 0:
        return None
    with _decoder() as decoder:
        forms = [_dictionary_form(t) for t in tokens]
        known = [i for i, f in enumerate(forms) if f and decoder.lookup_word(f) is not None]
        if len(known) < _KNOWN_SHARE * len(tokens):
            return None
        raw = (np.clip(pcm, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        try:
            decoder.set_align_text(" ".join(forms[i] for i in known))
            decoder.start_utt()
            decoder.process_raw(raw, full_utt=True)
            decoder.end_utt()
            segments = [
                (re.sub(r"\(\d+\)$", "", s.word), s.start_frame, s.end_frame)
                for s in decoder.seg() or ()
            ]
        except RuntimeError as exc:
            log.info("alignment failed: %s", exc)
            return None
    aligned = [s for s in segments if not s[0].startswith(("<", "["))]
    if [w for w, _, _ in aligned] != [forms[i] for i in known]:
        log.info(
            "alignment did not finish (%d of %d words): timed by sentence", len(aligned), len(known)
        )
        return None
    loud = _loud_frames(pcm, ALIGN_RATE)
    times: dict[int, tuple[float, float]] = {
        i: (_onset(loud, start, end) * _FRAME, (end + 1) * _FRAME)
        for i, (_, start, end) in zip(known, aligned, strict=True)
    }
    return _fill(tokens, times, pcm.size / ALIGN_RATE)


def _onset(loud: npt.NDArray[np.bool_], start: int, end: int) -> int:
    """The word's first loud frame: the aligner gives a word the pause before it where
    the text has no punctuation to say there is one."""
    found = np.flatnonzero(loud[start : end + 1])
    return start + int(found[0]) if found.size else start


def _fill(
    tokens: list[str], times: dict[int, tuple[float, float]], duration: float
) -> tuple[Span, ...]:
    """Every token's span: aligned ones as aligned, the others sharing the time between
    their aligned neighbours in proportion to their lengths."""
    spans: list[Span] = []
    i = 0
    while i < len(tokens):
        if i in times:
            start, end = times[i]
            spans.append(Span(tokens[i], round(start, 3), round(end, 3)))
            i += 1
            continue
        j = i
        while j < len(tokens) and j not in times:
            j += 1
        left = spans[-1].end if spans else 0.0
        right = times[j][0] if j < len(tokens) else duration
        run = tokens[i:j]
        total = sum(len(t) for t in run) or 1
        at = 0
        for token in run:
            start = left + (right - left) * at / total
            at += len(token)
            spans.append(Span(token, round(start, 3), round(left + (right - left) * at / total, 3)))
        i = j
    return tuple(spans)


def _loud_frames(pcm: npt.NDArray[np.float32], rate: int) -> npt.NDArray[np.bool_]:
    """Whether each 10 ms frame is louder than _SILENCE_DB under the loudest."""
    frame = int(rate * _FRAME)
    count = pcm.size // frame
    if count == 0:
        return np.zeros(0, dtype=bool)
    frames = pcm[: count * frame].reshape(count, frame).astype(np.float64)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    return np.asarray(level > level.max() + _SILENCE_DB)


def speech_stretches(pcm: npt.NDArray[np.float32], rate: int) -> list[tuple[float, float]]:
    """(start, end) of each stretch of speech: frames louder than _SILENCE_DB under the
    loudest, split where a silence lasts _MIN_PAUSE or longer."""
    loud = _loud_frames(pcm, rate)
    count = loud.size
    if count == 0:
        return []
    stretches: list[tuple[float, float]] = []
    start: int | None = None
    quiet = 0
    for index, is_loud in enumerate(loud):
        if is_loud:
            if start is None:
                start = index
            quiet = 0
        elif start is not None:
            quiet += 1
            if quiet * _FRAME >= _MIN_PAUSE:
                stretches.append((start * _FRAME, (index - quiet + 1) * _FRAME))
                start, quiet = None, 0
    if start is not None:
        stretches.append((start * _FRAME, (count - quiet) * _FRAME))
    return stretches
