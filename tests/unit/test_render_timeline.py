"""A render's arithmetic without I/O: the timeline, the caption files, the loudness meter."""

from __future__ import annotations

import math

import numpy as np
import pyloudnorm
import pytest

from speechbatch.adapters.audio import LoudnessMeter, gain_for
from speechbatch.domain.renders import (
    VTT_HEADER,
    ChapterMark,
    Cue,
    RenderOptions,
    Timeline,
    srt_cue,
    vtt_cue,
)

RATE = 1000  # one sample a millisecond keeps the arithmetic readable


def test_items_are_joined_with_gaps_and_longer_gaps_where_a_chapter_begins() -> None:
    options = RenderOptions("mp3", gap_ms=100, chapter_gap_ms=700)
    timeline = Timeline(RATE, options, {1: "Opening", 3: "Second"}, "Title")
    cues = [
        timeline.place(1, "a", 2000),
        timeline.place(2, "b", 1500),
        timeline.place(3, "c", 500),
        timeline.place(4, "d", 250),
    ]
    assert [(c.start, c.end) for c in cues] == [
        (0.0, 2.0),
        (2.1, 3.6),
        (4.3, 4.8),
        (4.9, 5.15),
    ]
    assert timeline.duration_seconds == 5.15
    assert timeline.chapters() == [
        ChapterMark("Opening", 0.0, 4.3),
        ChapterMark("Second", 4.3, 5.15),
    ]


def test_a_job_without_chapters_is_one_chapter_named_after_its_title() -> None:
    timeline = Timeline(RATE, RenderOptions("m4b"), {}, "My book")
    timeline.place(1, "a", 1000)
    timeline.place(2, "b", 1000)
    assert timeline.duration_seconds == 2.4  # the default gap is 400 ms
    assert timeline.chapters() == [ChapterMark("My book", 0.0, 2.4)]


def test_items_before_the_first_chapter_make_a_chapter_of_the_title() -> None:
    timeline = Timeline(RATE, RenderOptions("mp3", gap_ms=0, chapter_gap_ms=0), {2: "Two"}, "T")
    timeline.place(1, "intro", 1000)
    timeline.place(2, "body", 1000)
    assert timeline.chapters() == [ChapterMark("T", 0.0, 1.0), ChapterMark("Two", 1.0, 2.0)]


def test_caption_cues_keep_their_lines_drop_blank_ones_and_are_escaped() -> None:
    cue = Cue(3723.5, 3725.25, "A <b>bold</b> & \n\n new --> line")
    assert VTT_HEADER == "WEBVTT\n\n"
    assert vtt_cue(7, cue) == (
        "7\n01:02:03.500 --> 01:02:05.250\nA &lt;b&gt;bold&lt;/b&gt; &amp;\nnew -&gt; line\n\n"
    )
    assert srt_cue(7, cue) == "7\n01:02:03,500 --> 01:02:05,250\nA <b>bold</b> &\nnew -> line\n\n"


@pytest.mark.parametrize("piece", [1, 777, 2205, 100_000])
def test_streaming_meter_equals_pyloudnorm_on_the_whole_signal(piece: int) -> None:
    rate = 22050
    rng = np.random.default_rng(piece)
    # Noise whose level jumps every 100 ms, with silences: both gates matter.
    levels = rng.choice([0.0, 0.001, 0.05, 0.3], size=150)
    signal = (rng.standard_normal(rate * 8) * np.repeat(levels[:80], rate // 10)).astype(np.float32)
    meter = LoudnessMeter(rate)
    for start in range(0, len(signal), piece):
        meter.add(signal[start : start + piece])
    expected = pyloudnorm.Meter(rate).integrated_loudness(signal.astype(np.float64))
    assert abs(meter.integrated() - expected) < 0.02


def test_silence_measures_minus_infinity_and_gets_no_gain() -> None:
    meter = LoudnessMeter(22050)
    meter.add(np.zeros(22050 * 2, dtype=np.float32))
    assert meter.integrated() == -math.inf
    assert gain_for(meter.integrated(), -18.0) == 1.0
    assert gain_for(-24.0, None) == 1.0
    assert gain_for(-24.0, -18.0) == pytest.approx(10 ** (6 / 20))
