"""How well a render's caption cues start with their speech: each cue's start against
the nearest speech onset found in the decoded render (sound after a pause), for the
audio test and ``bench/caption_timing.py``."""

from __future__ import annotations

import statistics

from tests.support.render_audio import decode_all, onsets, parse_cues

# Items of prose with long sentences, clauses and short ones, as a book would have.
PROSE = [
    "Chapter one.",
    "The lawyer walked home along the river, past the closed shops and the lamps that "
    "were being lit one by one. He did not hurry. There was nobody waiting for him, and "
    "the evening was mild.",
    "At the corner he stopped; a door he had never noticed stood open, and somebody "
    "inside was reading aloud, slowly, as if to a child. He listened for a while. Then "
    "he went on.",
    "Nobody in the street could say who lived there, although the baker had an opinion, "
    "the tailor had another, and the old woman who sold newspapers had a third, which "
    "she gave to everyone who bought one.",
    "Chapter two.",
    "Morning came grey and cold. The lawyer drank his coffee standing at the window, "
    "watching the carts go by, and wondered whether he should knock on that door. "
    "Curiosity, he told himself, is a poor reason to disturb a stranger.",
    "By noon he had decided; by one o'clock he had changed his mind twice; and at three, "
    "with his coat buttoned against the wind, he was standing on the step.",
]
TOLERANCE = 0.150  # seconds: the contract's "within 150 ms"


def cue_offsets(audio: bytes, captions: str) -> list[float]:
    """Each cue's start minus the nearest speech onset in the audio (seconds)."""
    samples, rate = decode_all(audio)
    found = onsets(samples, rate, quiet_seconds=0.1)
    return [
        min((start - onset for onset in found), key=abs) for start, _, _ in parse_cues(captions)
    ]


def summary(offsets: list[float]) -> dict[str, float]:
    """The median and 95th percentile of the offsets' sizes, and the share within
    TOLERANCE."""
    sizes = sorted(abs(o) for o in offsets)
    p95 = sizes[min(len(sizes) - 1, round(0.95 * (len(sizes) - 1)))]
    within = sum(1 for s in sizes if s <= TOLERANCE) / len(sizes)
    return {"cues": len(sizes), "median": statistics.median(sizes), "p95": p95, "within": within}
