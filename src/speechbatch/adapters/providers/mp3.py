"""MP3 encoding of the offline voices' PCM (``lameenc``, no ffmpeg)."""

from __future__ import annotations

import lameenc

# Samples of silence the encoder puts before the audio (LAME's 576 + 529 at these rates):
# ``lameenc`` writes no gapless header, so a decoder keeps them, and every place in the
# PCM is this much later in the decoded file.
ENCODER_DELAY_SAMPLES = 1105
# LAME's algorithm quality 5 ("good quality, fast"): at 64 kbit/s the decoded speech is no
# further from Piper's PCM than at 2 ("near-best"), by signal-to-noise and by log-spectral
# distance, and 2 took twice the CPU: half of what a Piper job adds to Piper itself.
QUALITY = 5


def encode_mp3(pcm: bytes, rate: int) -> bytes:
    """Mono int16 PCM at ``rate`` Hz as 64 kbit/s MP3.

    Text that speaks nothing (only punctuation, say) still gets a playable file: a tenth
    of a second of silence rather than an empty or invalid MP3.
    """
    if len(pcm) < rate // 10 * 2:
        pcm += bytes(rate // 10 * 2 - len(pcm))
    encoder = lameenc.Encoder()
    encoder.set_channels(1)
    encoder.set_in_sample_rate(rate)
    encoder.set_bit_rate(64)
    encoder.set_quality(QUALITY)
    return bytes(encoder.encode(pcm) + encoder.flush())
