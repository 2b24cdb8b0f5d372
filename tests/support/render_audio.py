"""Real audio for render tests: tone items made with PyAV's LAME encoder (gapless, so an
item decodes to exactly the samples it was made from), a finished job built on them
directly in the database and storage, and readers of what a render wrote."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np
import numpy.typing as npt
from av.audio.stream import AudioStream
from sqlalchemy import insert, update

from speechbatch.adapters.models import Chapter, Item, ItemStatus, Job, JobStatus
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_job
from tests.helpers import LIMITS, concrete, resync_counters

RATE = 22050
Samples = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Tone:
    """One item's audio: a tone of ``seconds`` whose level wobbles like speech does."""

    text: str
    seconds: float
    frequency: float = 440.0
    amplitude: float = 0.2


def tone_samples(tone: Tone, rate: int = RATE) -> npt.NDArray[np.float32]:
    """The tone's samples: loud from the first sample (so its onset can be found)."""
    t = np.arange(int(tone.seconds * rate)) / rate
    wobble = 0.75 + 0.25 * np.sin(2 * np.pi * 3.0 * t)
    return (tone.amplitude * wobble * np.sin(2 * np.pi * tone.frequency * t)).astype(np.float32)


def encode_mp3(samples: npt.NDArray[np.float32], rate: int = RATE) -> bytes:
    """MP3 bytes of mono float samples (LAME through PyAV, with its gapless info frame)."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=rate, layout="mono")
        assert isinstance(stream, AudioStream)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = rate
        frame.pts = 0
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def decode_all(data: bytes) -> tuple[Samples, int]:
    """Every sample of an audio file (first stream, mixed to mono) and its rate."""
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        resampler = av.AudioResampler(format="dbl", layout="mono", rate=rate)
        pieces = [
            out.to_ndarray()[0].copy()
            for frame in container.decode(stream)
            for out in resampler.resample(frame)
        ]
        pieces += [out.to_ndarray()[0].copy() for out in resampler.resample(None)]
    return np.concatenate(pieces), rate


def finished_job(
    svc: Services,
    user: UserRecord,
    tones: list[Tone],
    *,
    chapters: Sequence[tuple[int, str]] = (),
    title: str = "render me",
) -> int:
    """A COMPLETED job whose items are DONE with the tones' MP3s as their audio.

    ``chapters`` are (first position, title) pairs, written as the import writes them.
    """
    job_id = create_job(svc.uow_factory, user, title, "alloy", [t.text for t in tones], LIMITS)
    starts = sorted(first for first, _ in chapters)
    with concrete(svc.uow_factory)() as uow:
        for position, tone in enumerate(tones, start=1):
            key = f"jobs/{job_id}/tone-{position}.mp3"
            svc.storage.write(key, encode_mp3(tone_samples(tone)))
            chapter = sum(1 for first in starts if first <= position) - 1 if starts else None
            uow.session.execute(
                update(Item)
                .where(Item.job_id == job_id, Item.position == position)
                .values(status=ItemStatus.DONE, audio_path=key, chapter=chapter)
            )
        for index, (first, chapter_title) in enumerate(sorted(chapters)):
            uow.session.execute(
                insert(Chapter).values(
                    job_id=job_id, index=index, title=chapter_title, first_position=first
                )
            )
        uow.session.execute(
            update(Job).where(Job.id == job_id).values(status=JobStatus.COMPLETED, attempt=1)
        )
        uow.commit()
    resync_counters(svc, job_id)
    return job_id


_CUE = re.compile(
    r"(\d\d):(\d\d):(\d\d)[.,](\d{3}) --> (\d\d):(\d\d):(\d\d)[.,](\d{3})\n(.*)", re.MULTILINE
)


def parse_cues(text: str) -> list[tuple[float, float, str]]:
    """(start, end, text) of every cue of a WebVTT or SubRip file."""

    def seconds(h: str, m: str, s: str, ms: str) -> float:
        return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000

    return [
        (seconds(*match.groups()[0:4]), seconds(*match.groups()[4:8]), match.group(9))
        for match in _CUE.finditer(text)
    ]


def onsets(samples: Samples, rate: int, *, quiet_seconds: float = 0.15) -> list[float]:
    """Where sound starts after at least ``quiet_seconds`` of silence (5 ms resolution)."""
    window = rate // 200
    frames = len(samples) // window
    rms = np.sqrt(np.mean(np.square(samples[: frames * window].reshape(frames, window)), axis=1))
    loud = rms > 0.01
    found: list[float] = []
    quiet = int(quiet_seconds * 200)
    run = quiet  # the file's start counts as after silence
    for i, is_loud in enumerate(loud):
        if is_loud:
            if run >= quiet:
                found.append(i * window / rate)
            run = 0
        else:
            run += 1
    return found


def expected_starts(tones: list[Tone], gaps: list[float]) -> list[float]:
    """Each item's start in seconds: durations and the gap before each one added up."""
    starts, at = [], 0.0
    for tone, gap in zip(tones, gaps, strict=True):
        at += gap
        starts.append(at)
        at += int(tone.seconds * RATE) / RATE
    return starts
