"""Quality flags measured on real audio: espeak's speech, and tones, silence and cut-off
audio made here; the openai provider's options on the wire; espeak's speed."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import numpy as np
import pytest
import responses
import soundfile

from speechbatch.adapters.audio.measure import measure
from speechbatch.adapters.providers.espeak import EspeakProvider
from speechbatch.adapters.providers.openai import OpenAIProvider
from speechbatch.domain.editing import OptionsError, clean_options
from speechbatch.domain.quality import SILENT, TOO_LONG, TOO_SHORT, Measurement, verdict
from speechbatch.runner.measure import measure_audio

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please mind the gap between the train and the platform edge.",
    "Our next stop is Central Station, where you can change for the airport line.",
    "In 1492, Columbus sailed the ocean blue, and nobody asked him for a receipt.",
    "Thank you for listening; the next chapter begins after a short pause.",
    "Speechbatch turns long lists of sentences into audio files you can publish.",
]


@pytest.fixture(scope="module")
def espeak() -> EspeakProvider:
    return EspeakProvider()


def wav(samples: np.ndarray, rate: int = 22050) -> bytes:
    """16-bit mono WAV bytes of float samples in -1..1."""
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def tone(seconds: float, level: float = 0.5, rate: int = 22050) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return level * np.sin(2 * np.pi * 220 * t)


@pytest.mark.parametrize("speed", [1.0, 2.0, 0.5])
def test_espeak_speech_is_not_suspect_at_any_speed(espeak: EspeakProvider, speed: float) -> None:
    """The characters-per-second band holds for ordinary sentences spoken at the job's
    speed (measured on the MP3 the provider makes, decoded by PyAV)."""
    for text in SENTENCES:
        audio = espeak.synthesize(text, "en-us", {"speed": speed})
        measured = measure(audio)
        assert measured is not None
        assert measured.peak > 0.05
        assert verdict(measured, len(text), speed) is None, (text, speed, measured)


def test_espeak_honours_speed(espeak: EspeakProvider) -> None:
    text = SENTENCES[2]
    normal = measure(espeak.synthesize(text, "en-us"))
    fast = measure(espeak.synthesize(text, "en-us", {"speed": 2.0}))
    assert normal is not None and fast is not None
    assert fast.duration_seconds < normal.duration_seconds * 0.7


def test_a_cut_off_take_is_too_short(espeak: EspeakProvider) -> None:
    """Audio that speaks only the first words of a long text (a provider that dropped
    the rest) is flagged."""
    long_text = " ".join(SENTENCES)
    first_words = espeak.synthesize("The quick brown fox.", "en-us")
    assert measure_audio(first_words, long_text, {}).suspect == TOO_SHORT


def test_silence_is_silent_and_a_long_tone_is_too_long() -> None:
    text = SENTENCES[0]
    assert measure_audio(wav(np.zeros(22050 * 3)), text, {}).suspect == SILENT
    assert measure_audio(wav(tone(3.0, level=0.004)), text, {}).suspect == SILENT
    assert measure_audio(wav(tone(60.0)), text, {}).suspect == TOO_LONG
    fine = measure_audio(wav(tone(3.0)), text, {})
    assert fine.suspect is None
    assert fine.duration_seconds == pytest.approx(3.0, abs=0.01)


def test_a_short_text_is_judged_only_for_silence() -> None:
    assert verdict(Measurement(duration_seconds=9.0, peak=0.5), len("Hi."), 1.0) is None
    assert verdict(Measurement(duration_seconds=0.5, peak=0.0), len("Hi."), 1.0) == SILENT


def test_audio_that_cannot_be_decoded_is_recorded_without_a_measurement() -> None:
    measured = measure_audio(b"ID3 not audio at all", SENTENCES[0], {})
    assert measured.duration_seconds is None and measured.suspect is None


@pytest.mark.parametrize(
    "raw",
    [
        {"speed": 0.2},
        {"speed": 4.5},
        {"speed": "fast"},
        {"speed": True},
        {"speed": float("nan")},
        {"instructions": "x" * 2001},
        {"instructions": 5},
        {"pitch": 2},
        {"speed": None},
        {"instructions": None},
        [],
        None,
    ],
)
def test_bad_options_are_refused(raw: object) -> None:
    with pytest.raises(OptionsError):
        clean_options(raw)


def test_options_are_normalized() -> None:
    assert clean_options({}) == {}
    assert clean_options({"speed": 1, "instructions": "  "}) == {}
    assert clean_options({"speed": 0.25, "instructions": " Calm. "}) == {
        "speed": 0.25,
        "instructions": "Calm.",
    }


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def test_openai_sends_speed_and_instructions_only_when_set(
    mocked: responses.RequestsMock,
) -> None:
    url = "https://tts.example.test/v1/audio/speech"
    mocked.post(url, body=b"ID3audio", status=200, content_type="audio/mpeg")
    provider = OpenAIProvider(
        base_url="https://tts.example.test/v1/",
        api_key="sk-test",
        model="gpt-4o-mini-tts",
        voices=("alloy",),
        timeout_seconds=5,
    )
    provider.synthesize("Hello", "alloy", {"speed": 1.5, "instructions": "Whisper."})
    provider.synthesize("Hello", "alloy")
    bodies = [json.loads(call.request.body or b"{}") for call in mocked.calls]
    assert bodies[0] == {
        "model": "gpt-4o-mini-tts",
        "input": "Hello",
        "voice": "alloy",
        "response_format": "mp3",
        "speed": 1.5,
        "instructions": "Whisper.",
    }
    assert "speed" not in bodies[1] and "instructions" not in bodies[1]
