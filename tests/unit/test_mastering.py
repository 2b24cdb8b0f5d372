"""The mastering arithmetic without files: true peak, the limiter, levels, the ID3 tag,
the check report's words, file names and narrators."""

from __future__ import annotations

import io

import mutagen.id3
import numpy as np
import scipy.signal

from speechbatch.adapters.audio.id3 import id3_tag
from speechbatch.adapters.audio.levels import LevelMeter
from speechbatch.adapters.audio.limiter import Limiter, window_min
from speechbatch.adapters.audio.loudness import LoudnessMeter
from speechbatch.adapters.audio.mastering import MOST_MAKE_UP_DB, limiter_loss, made_up
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.adapters.audio.peaks import TruePeakMeter
from speechbatch.domain.presets import PRESETS, Figures, check_report
from speechbatch.domain.renders import (
    ChapterMark,
    RenderOptions,
    Tags,
    Timeline,
    file_name,
    narrator_of,
)

RATE = 22050


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Noise shaped like a voice (low-passed, with syllable-rate swells), peaking over 0 dB."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    swell = (0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n) / RATE)) ** 2
    voice = scipy.signal.lfilter([1.0], [1.0, -0.85], rng.standard_normal(n))
    return (0.35 * swell * voice).astype(np.float32)


def oversampled_peak_db(x: np.ndarray) -> float:
    return float(
        20 * np.log10(np.abs(scipy.signal.resample_poly(x.astype(np.float64), 8, 1)).max())
    )


def test_true_peak_sees_between_the_samples() -> None:
    # A tone at a quarter of the rate, sampled 45 degrees off its crests: every sample
    # is at 0.707 of the peak (-3 dB), the signal between them reaches it.
    t = np.arange(RATE) / RATE
    x = (0.5 * np.sin(2 * np.pi * RATE / 4 * t + np.pi / 4)).astype(np.float32)
    meter = TruePeakMeter()
    for start in range(0, len(x), 1000):
        meter.add(x[start : start + 1000])
    assert abs(meter.dbtp() - 20 * np.log10(0.5)) < 0.1
    assert 20 * np.log10(np.abs(x).max()) < 20 * np.log10(0.5) - 2.9


def test_the_limiter_holds_the_true_peak_and_passes_every_sample_in_order() -> None:
    x = speech_like(20)
    assert oversampled_peak_db(x) > 0.0
    limiter = Limiter(RATE, -2.0)
    out = np.concatenate(
        [limiter.process(x[i : i + 3000]) for i in range(0, len(x), 3000)] + [limiter.flush()]
    )
    assert len(out) == len(x)
    # scipy's longer filter reads a limited peak up to 0.25 dB above BS.1770's (the
    # limiter's margin covers it).
    assert oversampled_peak_db(out) <= -2.0 + 0.3
    gain = out / np.where(np.abs(x) > 1e-3, x, np.nan)
    # The output is the input times a gain in (0, 1], aligned sample for sample.
    assert np.nanmin(gain) > 0.2 and np.nanmax(gain) <= 1.0 + 1e-6


def test_the_limiter_moves_its_gain_smoothly_and_leaves_quiet_audio_alone() -> None:
    x = speech_like(10)
    limiter = Limiter(RATE, -2.0)
    out = np.concatenate([limiter.process(x), limiter.flush()])
    audible = np.abs(x) > 1e-4
    gain_db = 20 * np.log10(np.abs(out[audible] / x[audible]))
    steps = np.diff(gain_db)[np.diff(np.flatnonzero(audible)) == 1]
    # The gain ramps: no step of even a tenth of a dB from one sample to the next.
    assert gain_db.min() < -3.0 and np.abs(steps).max() < 0.1
    quiet = (x * 0.1).astype(np.float32)
    again = Limiter(RATE, -2.0)
    assert np.array_equal(np.concatenate([again.process(quiet), again.flush()]), quiet)


def test_window_min_is_the_minimum_over_the_window() -> None:
    values = np.random.default_rng(3).standard_normal(500)
    found = window_min(values, 7, 3)
    assert len(found) == len(values) - 10
    assert all(found[i] == values[i : i + 11].min() for i in range(len(found)))


def test_levels_find_rms_noise_floor_and_room_tone_at_both_ends() -> None:
    rng = np.random.default_rng(0)
    tone = (rng.standard_normal(RATE * 3) * 10 ** (-70 / 20)).astype(np.float32)
    voice = (0.2 * np.sin(np.arange(RATE * 2) / 3)).astype(np.float32)
    x = np.concatenate([tone[: int(0.75 * RATE)], voice, tone[:RATE], voice, tone[: 2 * RATE]])
    meter = LevelMeter(RATE)
    for start in range(0, len(x), 777):
        meter.add(x[start : start + 777])
    assert abs(meter.rms_db() - 10 * np.log10(np.mean(np.square(x.astype(np.float64))))) < 1e-6
    assert abs(meter.noise_floor_db() - -70.0) < 0.5
    assert abs(meter.head() - 0.75) < 0.011 and abs(meter.tail() - 2.0) < 0.011


def test_id3_chapters_keep_their_order_past_255_under_sub_tables() -> None:
    chapters = [ChapterMark(f"C{'x' * (n % 7)}{n}", n, n + 1) for n in range(300)]
    tags = mutagen.id3.ID3(io.BytesIO(id3_tag(Tags("Book", "Book"), chapters)))
    tocs = {frame.element_id: frame for frame in tags.getall("CTOC")}
    marks = {frame.element_id: frame for frame in tags.getall("CHAP")}
    order = [c for sub in tocs["toc"].child_element_ids for c in tocs[sub].child_element_ids]
    assert [str(marks[i].sub_frames["TIT2"]) for i in order] == [c.title for c in chapters]


def _figures(**changes: float) -> Figures:
    base = {"seconds": 60.0, "integrated_lufs": -20.0, "true_peak_dbtp": -4.0, "rms_db": -20.5,
            "noise_floor_db": -70.0, "head_seconds": 0.75, "tail_seconds": 2.0}  # fmt: skip
    return Figures(**(base | changes))


def test_the_check_says_which_rule_each_failure_breaks() -> None:
    acx = PRESETS["acx"]
    chapters = [("Opening", _figures()), ("Loud", _figures(rms_db=-16.04, head_seconds=0.2))]
    report = check_report(acx, None, _figures(true_peak_dbtp=-2.5), chapters)
    assert report["passed"] is False
    assert report["failures"] == [
        "The whole file: true peak -2.5 dBTP is too high (ACX allows at most -3 dB)",
        "Chapter 2 (Loud): RMS -16 dB is outside ACX's -23 to -18 dB",
        "Chapter 2 (Loud): 0.20 s of room tone at the start; ACX asks for 0.5 to 1 s",
    ]
    quiet = check_report(PRESETS["podcast"], -16.0, _figures(integrated_lufs=-18.2), [])
    assert quiet["failures"] == [
        "The whole file: integrated loudness -18.2 LUFS is not within 1 LU of -16 LUFS"
    ]
    silent = check_report(None, None, _figures(noise_floor_db=float("-inf")), [])
    assert (silent["passed"], silent["noise_floor_db"]) == (True, -120.0)


def test_file_names_from_any_title_are_safe() -> None:
    assert file_name('a/b\\c: "d" <e>|f?*\n\x00g. ', "mp3") == "a b c d e f g.mp3"
    assert file_name("...", "vtt") == "render.vtt"
    assert file_name("\u00e9t\u00e9 " * 100, "m4b").endswith("t\u00e9.m4b")
    assert len(file_name("x" * 500, "zip")) == 124


def test_narrators_are_the_voices_speakers() -> None:
    assert narrator_of(["en_US-joe-medium", "alloy", "piper:en_GB-alba-medium", "alloy"]) == (
        "Joe, alloy, Alba"
    )


def test_chapter_spans_end_where_each_chapters_speech_ends() -> None:
    timeline = Timeline(1000, RenderOptions("mp3", 100, 700), {1: "A", 3: "B"}, "T")
    for position, samples in ((1, 2000), (2, 1500), (3, 500), (4, 250)):
        assert timeline.chapter_of(position) == (0 if position < 3 else 1)
        timeline.place(position, "", samples)
    assert timeline.chapter_spans() == [(0, 3600), (4300, 5150)]


def peaky_speech(seconds: float) -> Samples:
    """``speech_like`` with a burst three times as loud every 0.2 s (plosives), its peak
    at full scale, as Piper sets each sentence's: peaks far above its loudness."""
    x = speech_like(seconds).astype(np.float64)
    for at in range(0, x.size - 200, RATE // 5):
        x[at : at + 110] *= 3
    return (x / np.abs(x).max()).astype(np.float32)


def _limited_loudness(x: Samples, gain: float, ceiling_db: float) -> float:
    limiter, meter = Limiter(RATE, ceiling_db), LoudnessMeter(RATE)
    meter.add(limiter.process((x * gain).astype(np.float32)))
    meter.add(limiter.flush())
    return meter.integrated()


def test_the_gain_made_up_for_the_limiter_brings_peaky_speech_to_its_target() -> None:
    x = peaky_speech(20.0)
    meter = LoudnessMeter(RATE)
    meter.add(x)
    target, ceiling = -18.0, -2.0
    plain = float(10 ** ((target - meter.integrated()) / 20))
    assert _limited_loudness(x, plain, ceiling) < target - 1.0  # what renders did
    gain = made_up(
        plain, ceiling, lambda g, c: limiter_loss([x[: RATE * 10], x[RATE * 10 :]], g, c, RATE)
    )
    assert abs(_limited_loudness(x, gain, ceiling) - target) <= 0.3


def test_nothing_is_made_up_where_the_limiter_takes_nothing_and_never_past_the_cap() -> None:
    quiet: Samples = (speech_like(5.0) * 0.05).astype(np.float32)
    assert limiter_loss([quiet], 1.0, -2.0, RATE) == 0.0
    assert made_up(0.5, -2.0, lambda g, c: limiter_loss([quiet], g, c, RATE)) == 0.5
    # A loss that grows as fast as the gain never settles: the cap holds.
    capped = made_up(1.0, -2.0, lambda g, c: 20 * float(np.log10(g)) + 4.0)
    assert abs(20 * np.log10(capped) - MOST_MAKE_UP_DB) < 1e-9
