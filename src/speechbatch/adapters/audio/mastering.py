"""What a preset makes of a render: the plan of pass 2 (gains, limiter, room tone, files),
the check of what it wrote, and the ZIP of its chapter files."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from speechbatch.adapters.audio.check import measure_file
from speechbatch.adapters.audio.limiter import Limiter
from speechbatch.adapters.audio.loudness import LoudnessMeter, gain_for
from speechbatch.adapters.audio.master import MasterPlan
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.adapters.audio.writer import Encoding
from speechbatch.domain.presets import (
    PRESETS,
    ROOM_TONE_DB,
    check_report,
    limiter_ceiling,
    rms_gain,
)
from speechbatch.domain.renders import ChapterMark, RenderOptions, Tags, file_name

# What the limiter takes off a file's loudness is made up for, up to this (dB): past it
# the file would be more limiter than speech, and its check report says it misses.
MOST_MAKE_UP_DB = 6.0
MAKE_UP_TRIALS = 3
MAKE_UP_TOLERANCE_DB = 0.1

# The limiter's loss at a gain and a ceiling (dB): see ``limiter_loss``.
LossAt = Callable[[float, float], float]


def limiter_loss(pieces: Iterable[Samples], gain: float, ceiling_db: float, rate: int) -> float:
    """How much quieter (LU) ``pieces`` at ``gain`` come out of the limiter than they
    went in: a voice whose peaks stand far above its speech (Piper sets each sentence's
    peak at full scale) loses 1-2 LU on its way to -18 LUFS."""
    before, after = LoudnessMeter(rate), LoudnessMeter(rate)
    limiter = Limiter(rate, ceiling_db)
    for piece in pieces:
        louder = piece * gain
        before.add(louder)
        after.add(limiter.process(louder))
    after.add(limiter.flush())
    loss = before.integrated() - after.integrated()
    return loss if math.isfinite(loss) else 0.0


def made_up(gain: float, ceiling_db: float, loss_at: LossAt) -> float:
    """``gain`` raised by what the limiter will take off: the ``x`` for which
    ``x = loss_at(gain + x)`` (dB), found by repeating it (the limiter takes off less
    than each dB added, so it settles); at most ``MOST_MAKE_UP_DB``."""
    extra = 0.0
    for _ in range(MAKE_UP_TRIALS):
        loss = min(loss_at(gain * 10 ** (extra / 20), ceiling_db), MOST_MAKE_UP_DB)
        if abs(loss - extra) <= MAKE_UP_TOLERANCE_DB:
            break
        extra = loss
    return gain * 10 ** (extra / 20)


def plan_master(
    options: RenderOptions,
    rate: int,
    chapters: list[ChapterMark],
    spans: list[tuple[int, int]],
    loudness: float,
    energies: list[float],
    tags: Tags,
    workdir: Path,
    loss_at: LossAt | None = None,
) -> MasterPlan:
    """Pass 2's plan from pass 1's figures: one gain to the loudness target (raised by
    what the limiter takes off, as ``loss_at`` measures it), or (acx) each chapter's gain
    to the RMS target of its own file, room tone included."""
    preset = PRESETS[options.preset] if options.preset else None
    encoding = Encoding(options.format, rate, rate)
    if preset is None or preset.rms_target is None:
        ceiling = limiter_ceiling(preset)
        gain = gain_for(loudness, options.loudness_lufs)
        if options.loudness_lufs is not None and loss_at is not None:
            gain = made_up(gain, ceiling, loss_at)
        return MasterPlan(encoding, chapters, spans, [gain] * len(spans), ceiling, tags)
    head, tail = round(preset.head_seconds * rate), round(preset.tail_seconds * rate)
    target = preset.rms_target
    gains = [
        rms_gain(target, energy, head + (end - start) + tail)
        for (start, end), energy in zip(spans, energies, strict=True)
    ]
    return MasterPlan(
        Encoding(options.format, rate, preset.rate or rate, preset.bit_rate or 0),
        chapters,
        spans,
        gains,
        limiter_ceiling(preset),
        tags,
        room_tone_db=ROOM_TONE_DB,
        chapter_files=[workdir / f"chapter-{n:04d}.{options.format}" for n in range(len(spans))]
        if preset.chapter_files
        else [],
        head_samples=head,
        tail_samples=tail,
    )


def check_render(
    plan: MasterPlan, options: RenderOptions, book: Path, tick: Callable[[], None]
) -> dict[str, object]:
    """The check report of what pass 2 wrote, measured on the decoded files: the whole
    file, and each chapter's file (acx) or each chapter's span of the whole file.
    ``tick`` is called between pieces of audio."""
    preset = PRESETS[options.preset] if options.preset else None
    rate = plan.encoding.out_rate
    spans = [(c.start_seconds, c.end_seconds) for c in plan.chapters]
    whole, parts = measure_file(book, rate, [] if plan.chapter_files else spans, tick)
    if plan.chapter_files:
        parts = [measure_file(path, rate, tick=tick)[0] for path in plan.chapter_files]
    titles = [c.title for c in plan.chapters]
    return check_report(preset, options.loudness_lufs, whole, list(zip(titles, parts, strict=True)))


def pack_chapter_files(plan: MasterPlan, path: Path, tick: Callable[[], None]) -> None:
    """The chapter files in one ZIP (stored: MP3 does not compress), named in order;
    ``tick`` is called between files."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for number, (chapter, source) in enumerate(
            zip(plan.chapters, plan.chapter_files, strict=True), start=1
        ):
            tick()
            name = file_name(f"{number:02d} {chapter.title}", source.suffix.lstrip("."))
            archive.write(source, arcname=name)
