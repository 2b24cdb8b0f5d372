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
    r"(\d\d):(\d\d):(\d\d)[.,](\d{3}) --> (\d\d):(\d\d):(\d\d)[.,](\d{3})\n((?:[^\n]+\n?)+)",
    re.MULTILINE,
)


def parse_cues(text: str) -> list[tuple[float, float, str]]:
    """(start, end, text) of every cue of a WebVTT or SubRip file (a cue's lines joined
    by a line break)."""

    def seconds(h: str, m: str, s: str, ms: str) -> float:
        return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000

    return [
        (seconds(*match.groups()[0:4]), seconds(*match.groups()[4:8]), match.group(9).strip())
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


def true_peak_db(samples: Samples) -> float:
    """The true peak in dB, by scipy's polyphase 8x oversampling (not the app's filter)."""
    import scipy.signal

    return float(20 * np.log10(np.abs(scipy.signal.resample_poly(samples, 8, 1)).max()))


def rms_db(samples: Samples) -> float:
    """The RMS of every sample, in dB."""
    return float(10 * np.log10(np.mean(np.square(samples))))


def noise_floor_db(samples: Samples, rate: int) -> float:
    """The RMS of the quietest half second (any start), in dB."""
    width = rate // 2
    sums = np.concatenate([[0.0], np.cumsum(np.square(samples))])
    return float(10 * np.log10(max((sums[width:] - sums[:-width]).min() / width, 1e-30)))


def quiet_ends(samples: Samples, rate: int, threshold_db: float = -50.0) -> tuple[float, float]:
    """Seconds of quiet (10 ms windows below ``threshold_db``) at the start and the end."""
    window = rate // 100
    frames = len(samples) // window
    levels = 10 * np.log10(
        np.mean(np.square(samples[: frames * window].reshape(frames, window)), axis=1) + 1e-30
    )
    loud = np.flatnonzero(levels > threshold_db)
    return float(loud[0] * window / rate), float(
        len(samples) / rate - (loud[-1] + 1) * window / rate
    )


_MPEG1_LAYER3_KBPS = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
_MPEG1_RATES = [44100, 48000, 32000]


def mp3_frame_bit_rates(data: bytes) -> tuple[set[int], set[int], int]:
    """(bit rates in kbps, sample rates, frame count) of every MPEG-1 Layer III frame
    after the ID3v2 tag, read from the frame headers (a CBR file has one bit rate)."""
    at = 0
    if data[:3] == b"ID3":
        size = data[6:10]
        at = 10 + ((size[0] << 21) | (size[1] << 14) | (size[2] << 7) | size[3])
    kbps, rates, frames = set(), set(), 0
    while at + 4 <= len(data):
        header = int.from_bytes(data[at : at + 4], "big")
        if header >> 21 != 0x7FF or (header >> 17) & 0xF != 0b1101:  # sync, MPEG-1 Layer III
            raise ValueError(f"not an MPEG-1 Layer III frame at byte {at}")
        rate = _MPEG1_RATES[(header >> 10) & 3]
        bit_rate = _MPEG1_LAYER3_KBPS[(header >> 12) & 0xF]
        kbps.add(bit_rate)
        rates.add(rate)
        frames += 1
        at += 144_000 * bit_rate // rate + ((header >> 9) & 1)
    return kbps, rates, frames
