"""Offline speech with libespeak-ng (shipped by the espeakng-loader wheel), encoded to MP3."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping
from typing import Any

import espeakng_loader

from speechbatch.adapters.providers.base import CharacterBilled, PermanentProviderError
from speechbatch.adapters.providers.mp3 import encode_mp3
from speechbatch.domain.editing import speed_of

# Constants from speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_EE_OK = 0
_ESPEAK_RATE = 1  # espeakRATE: words per minute, 80-450 (175 by default)
_DEFAULT_RATE = 175
_MIN_RATE = 80
_MAX_RATE = 450

_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)

# libespeak-ng keeps global state (current voice, callback, buffers) and is not
# thread-safe, so initialisation and every synthesis run under this one lock.
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_sample_rate = 22050
_chunks: list[bytes] = []


def _collect(wav: ctypes._Pointer[ctypes.c_short] | None, numsamples: int, events: int) -> int:
    # The library calls back with NULL/0 at the end of synthesis; string_at copies the
    # int16 samples out before espeak reuses its buffer.
    if wav and numsamples > 0:
        _chunks.append(ctypes.string_at(wav, numsamples * 2))
    return 0  # 0 = continue synthesis


# Module-level so the C side never holds a pointer to a garbage-collected thunk.
_callback = _SynthCallback(_collect)


def _library() -> ctypes.CDLL:
    """Load and initialise libespeak-ng once; the caller holds ``_lock``."""
    global _lib, _sample_rate
    if _lib is None:
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synchronize.argtypes = []
        lib.espeak_Synchronize.restype = ctypes.c_int
        rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0
        )
        if rate <= 0:
            raise PermanentProviderError(f"espeak-ng failed to initialise ({rate})")
        lib.espeak_SetSynthCallback(_callback)
        _sample_rate = rate
        _lib = lib
    return _lib


def _synthesize_pcm(text: str, voice: str, speed: float = 1.0) -> tuple[bytes, int]:
    """Return mono int16 PCM (native byte order) and its sample rate."""
    data = text.encode("utf-8")
    words_per_minute = round(min(_MAX_RATE, max(_MIN_RATE, _DEFAULT_RATE * speed)))
    with _lock:
        lib = _library()
        if lib.espeak_SetVoiceByName(voice.encode("utf-8")) != _EE_OK:
            raise PermanentProviderError(f"espeak-ng has no voice {voice!r}")
        # The rate is the library's global state: set on every call, under the lock.
        lib.espeak_SetParameter(_ESPEAK_RATE, words_per_minute, 0)
        _chunks.clear()
        try:
            status = lib.espeak_Synth(
                data, len(data) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None
            )
            lib.espeak_Synchronize()
            if status != _EE_OK:
                raise PermanentProviderError(f"espeak-ng synthesis failed ({status})")
            return b"".join(_chunks), _sample_rate
        finally:
            _chunks.clear()


class EspeakProvider(CharacterBilled):
    """Free, offline TTS: espeak-ng speech encoded as 64 kbit/s mono MP3.

    Safe to call from many threads: synthesis is serialised (the C library is not
    thread-safe, and it is fast), MP3 encoding runs in parallel.
    """

    name = "espeak"
    voices: tuple[str, ...] = ("en-us", "en", "de", "fr", "es", "it")
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        """Speak ``text`` with ``voice`` and return MP3 bytes (one call, no retries);
        ``options["speed"]`` scales the speaking rate, ``instructions`` are ignored."""
        if voice not in self.voices:
            raise PermanentProviderError(f"unknown voice {voice!r} for provider espeak")
        pcm, rate = _synthesize_pcm(text, voice, speed_of(options or {}))
        # Text that speaks nothing (only punctuation, say) still gets a playable file:
        # a tenth of a second of silence rather than an empty or invalid MP3.
        if len(pcm) < rate // 10 * 2:
            pcm += bytes(rate // 10 * 2 - len(pcm))
        return encode_mp3(pcm, rate)

    def __repr__(self) -> str:
        return "EspeakProvider()"
