"""EspeakProvider: real offline synthesis through libespeak-ng, encoded to MP3."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from speechbatch.adapters.providers import PermanentProviderError
from speechbatch.adapters.providers.espeak import EspeakProvider

# MPEG audio header tables (Layer III only), for walking the frames of the output.
_BITRATES_KBPS = {
    # version bits -> bitrate index table
    3: [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],  # MPEG-1
    2: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],  # MPEG-2
    0: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],  # MPEG-2.5
}
_SAMPLE_RATES = {3: [44100, 48000, 32000], 2: [22050, 24000, 16000], 0: [11025, 12000, 8000]}


def mp3_frames(data: bytes) -> list[tuple[int, int]]:
    """Walk MPEG Layer III frames; return (sample_rate, samples) per frame or fail."""
    position = 0
    if data[:3] == b"ID3":  # skip an ID3v2 tag: 10-byte header + syncsafe size
        size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
        position = 10 + size
    frames: list[tuple[int, int]] = []
    while position + 4 <= len(data):
        header = data[position : position + 4]
        assert header[0] == 0xFF and header[1] & 0xE0 == 0xE0, f"no frame sync at {position}"
        version = (header[1] >> 3) & 0b11
        layer = (header[1] >> 1) & 0b11
        assert version != 1 and layer == 0b01, "not MPEG audio Layer III"
        bitrate = _BITRATES_KBPS[version][header[2] >> 4] * 1000
        rate = _SAMPLE_RATES[version][(header[2] >> 2) & 0b11]
        padding = (header[2] >> 1) & 1
        samples = 1152 if version == 3 else 576
        length = samples // 8 * bitrate // rate + padding
        assert length > 4
        frames.append((rate, samples))
        position += length
    assert position == len(data), "trailing bytes after the last frame"
    return frames


@pytest.fixture(scope="module")
def provider() -> EspeakProvider:
    return EspeakProvider()


def test_synthesizes_decodable_mp3(provider: EspeakProvider) -> None:
    audio = provider.synthesize("Hello, this is a test of offline speech.", "en-us")
    assert len(audio) > 4000
    assert audio[:3] == b"ID3" or (audio[0] == 0xFF and audio[1] & 0xE0 == 0xE0)
    frames = mp3_frames(audio)
    assert {rate for rate, _ in frames} == {22050}
    seconds = sum(samples for _, samples in frames) / 22050
    assert 1.0 < seconds < 10.0


def test_attributes(provider: EspeakProvider) -> None:
    assert provider.name == "espeak"
    assert provider.content_type == "audio/mpeg"
    assert provider.file_extension == "mp3"
    assert provider.max_chars == 4096
    assert "en-us" in provider.voices


@pytest.mark.parametrize("voice", EspeakProvider.voices)
def test_every_voice_speaks(provider: EspeakProvider, voice: str) -> None:
    assert len(mp3_frames(provider.synthesize("One two three.", voice))) > 10


@pytest.mark.parametrize("text", ["...!?", " ", "\u00e9t\u00e9 \u2014 na\u00efve \U0001f600"])
def test_text_without_speech_still_gives_valid_mp3(provider: EspeakProvider, text: str) -> None:
    assert mp3_frames(provider.synthesize(text, "en-us"))


def test_longest_text(provider: EspeakProvider) -> None:
    text = ("The quick brown fox jumps over the lazy dog. " * 100)[: provider.max_chars]
    assert len(mp3_frames(provider.synthesize(text, "en"))) > 100


def test_unknown_voice_is_permanent(provider: EspeakProvider) -> None:
    with pytest.raises(PermanentProviderError, match="unknown voice"):
        provider.synthesize("hello", "klingon")


def test_concurrent_synthesis(provider: EspeakProvider) -> None:
    # Texts of very different lengths, so a thread that got another's samples (or none)
    # would show up as a wrong duration. espeak-ng adds a little randomness to its
    # waveform, so compare durations rather than bytes.
    texts = [" ".join(["hello"] * (n + 1) * 4) + "." for n in range(8)]

    def seconds(audio: bytes) -> float:
        return sum(samples for _, samples in mp3_frames(audio)) / 22050

    serial = [seconds(provider.synthesize(text, "en-us")) for text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = [seconds(a) for a in pool.map(lambda t: provider.synthesize(t, "en-us"), texts)]
    for alone, together in zip(serial, parallel, strict=True):
        assert together == pytest.approx(alone, rel=0.1)
    assert parallel == sorted(parallel)
