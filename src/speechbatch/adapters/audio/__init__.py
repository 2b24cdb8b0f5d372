"""Audio files: decode to PCM, measure loudness, encode a render with its chapters.

Everything works on mono float32 PCM at one sample rate, in pieces, so that memory does
not grow with the length of what is decoded or encoded.
"""

from speechbatch.adapters.audio.loudness import LoudnessMeter, gain_for
from speechbatch.adapters.audio.pcm import RATE, decode
from speechbatch.adapters.audio.writer import AudioWriter

__all__ = ["RATE", "AudioWriter", "LoudnessMeter", "decode", "gain_for"]
