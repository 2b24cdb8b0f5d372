"""What a render is mastered to and checked against: the presets, the gains that meet
them, and the check report that judges the decoded files, each failure said in words.

Pure arithmetic over figures that the audio adapters measure; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Levels below this (digital silence) read as this: JSON has no -infinity.
LEVEL_FLOOR_DB = -120.0
# Without a preset a render never clips: its true peak stays at or below this.
DEFAULT_TRUE_PEAK_MAX = -1.0
# The limiter aims this far below the rule: a lossy encoder's output overshoots the PCM
# it was given (measured: up to 0.5 dB at 64 kbps), and the check is on the decoded file.
ENCODER_MARGIN_DB = 1.0
# Room tone (acx): a faint noise floor under everything, far below the -60 dB rule.
ROOM_TONE_DB = -72.0


@dataclass(frozen=True)
class Preset:
    """A publisher's or a platform's rules for a render."""

    name: str
    label: str
    true_peak_max: float
    loudness_lufs: float | None = None  # integrated target (None: set by RMS)
    loudness_tolerance: float = 1.0
    rms_range: tuple[float, float] | None = None  # per file, dB
    noise_floor_max: float | None = None
    head_tone: tuple[float, float] | None = None  # room tone at a file's start, seconds
    tail_tone: tuple[float, float] | None = None
    chapter_files: bool = False  # one file per chapter (a ZIP) besides the whole book
    rate: int | None = None  # the files' sample rate (None: the render's)
    bit_rate: int | None = None  # constant bit rate (None: the format's own)
    formats: tuple[str, ...] = ("mp3", "m4b")

    @property
    def rms_target(self) -> float | None:
        """The RMS a file is brought to: the middle of the allowed range."""
        return None if self.rms_range is None else sum(self.rms_range) / 2

    @property
    def head_seconds(self) -> float:
        """Room tone written before a chapter file's speech: near the least allowed, as a
        voice's first take often begins with silence of its own (espeak's and Piper's
        about 0.1 to 0.3 s)."""
        return 0.0 if self.head_tone is None else self.head_tone[0] + 0.1

    @property
    def tail_seconds(self) -> float:
        """Room tone written after a chapter file's speech."""
        return 0.0 if self.tail_tone is None else 2.0


PRESETS = {
    "acx": Preset(
        "acx", "ACX (Audible)", true_peak_max=-3.0, rms_range=(-23.0, -18.0),
        noise_floor_max=-60.0, head_tone=(0.5, 1.0), tail_tone=(1.0, 5.0),
        chapter_files=True, rate=44100, bit_rate=192_000, formats=("mp3",),
    ),
    "podcast": Preset("podcast", "Podcast", true_peak_max=-1.0, loudness_lufs=-16.0),
    "ebu": Preset(
        "ebu", "EBU R 128", true_peak_max=-1.0, loudness_lufs=-23.0, loudness_tolerance=0.5
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Figures:
    """What was measured on one decoded file (or one chapter's span of it)."""

    seconds: float
    integrated_lufs: float
    true_peak_dbtp: float
    rms_db: float
    noise_floor_db: float
    head_seconds: float  # before the first sound above the room tone
    tail_seconds: float  # after the last one


def level(value: float) -> float:
    """A level in dB as reported: to 0.1 dB, silence at the floor."""
    if not math.isfinite(value) or value < LEVEL_FLOOR_DB:
        return LEVEL_FLOOR_DB
    return round(value, 1)


def limiter_ceiling(preset: Preset | None) -> float:
    """The true peak the limiter holds the PCM to (dBTP)."""
    rule = DEFAULT_TRUE_PEAK_MAX if preset is None else preset.true_peak_max
    return rule - ENCODER_MARGIN_DB


def rms_gain(target_db: float, energy: float, samples: int) -> float:
    """The linear gain that brings a file of ``samples`` whose squares sum to ``energy``
    to an RMS of ``target_db`` (1 for silence)."""
    if samples <= 0 or energy <= 0:
        return 1.0
    return float(10 ** (target_db / 20) / math.sqrt(energy / samples))


def _failures_of(
    preset: Preset | None, target_lufs: float | None, name: str, f: Figures, whole: bool
) -> list[str]:
    rules = "ACX" if preset is not None and preset.name == "acx" else None
    peak_max = DEFAULT_TRUE_PEAK_MAX if preset is None else preset.true_peak_max
    out: list[str] = []
    if f.true_peak_dbtp > peak_max:
        why = f"{rules} allows at most {peak_max:g} dB" if rules else f"at most {peak_max:g} dBTP"
        out.append(f"{name}: true peak {level(f.true_peak_dbtp):g} dBTP is too high ({why})")
    if whole and target_lufs is not None:
        tolerance = 1.0 if preset is None else preset.loudness_tolerance
        if abs(f.integrated_lufs - target_lufs) > tolerance:
            out.append(
                f"{name}: integrated loudness {level(f.integrated_lufs):g} LUFS is not within "
                f"{tolerance:g} LU of {target_lufs:g} LUFS"
            )
    if preset is None or preset.rms_range is None or whole:
        return out
    low, high = preset.rms_range
    if not low <= f.rms_db <= high:
        out.append(f"{name}: RMS {level(f.rms_db):g} dB is outside ACX's {low:g} to {high:g} dB")
    if preset.noise_floor_max is not None and f.noise_floor_db > preset.noise_floor_max:
        out.append(
            f"{name}: noise floor {level(f.noise_floor_db):g} dB is above ACX's "
            f"{preset.noise_floor_max:g} dB"
        )
    for where, measured, bounds in (
        ("at the start", f.head_seconds, preset.head_tone),
        ("at the end", f.tail_seconds, preset.tail_tone),
    ):
        if bounds is not None and not bounds[0] <= measured <= bounds[1]:
            out.append(
                f"{name}: {measured:.2f} s of room tone {where}; ACX asks for "
                f"{bounds[0]:g} to {bounds[1]:g} s"
            )
    return out


def check_report(
    preset: Preset | None,
    target_lufs: float | None,
    whole: Figures,
    chapters: list[tuple[str, Figures]],
) -> dict[str, object]:
    """The render's check: the whole file's figures, each chapter's, and what fails which
    rule. ``chapters`` are the chapter files (acx) or the chapters' spans of the file."""
    failures = _failures_of(preset, target_lufs, "The whole file", whole, True)
    for number, (title, figures) in enumerate(chapters, start=1):
        name = f"Chapter {number} ({title})"
        failures += _failures_of(preset, target_lufs, name, figures, False)
    return {
        "integrated_lufs": level(whole.integrated_lufs),
        "true_peak_dbtp": level(whole.true_peak_dbtp),
        "rms_db": level(whole.rms_db),
        "noise_floor_db": level(whole.noise_floor_db),
        "chapters": [
            {
                "title": title,
                "rms_db": level(f.rms_db),
                "true_peak_dbtp": level(f.true_peak_dbtp),
                "seconds": round(f.seconds, 3),
            }
            for title, f in chapters
        ],
        "preset": None if preset is None else preset.name,
        "passed": not failures,
        "failures": failures,
    }
