"""What a preset makes of a render: the plan of pass 2 (gains, limiter, room tone, files),
the check of what it wrote, and the ZIP of its chapter files."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

from speechbatch.adapters.audio.check import measure_file
from speechbatch.adapters.audio.loudness import gain_for
from speechbatch.adapters.audio.master import MasterPlan
from speechbatch.adapters.audio.writer import Encoding
from speechbatch.domain.presets import (
    PRESETS,
    ROOM_TONE_DB,
    check_report,
    limiter_ceiling,
    rms_gain,
)
from speechbatch.domain.renders import ChapterMark, RenderOptions, Tags, file_name


def plan_master(
    options: RenderOptions,
    rate: int,
    chapters: list[ChapterMark],
    spans: list[tuple[int, int]],
    loudness: float,
    energies: list[float],
    tags: Tags,
    workdir: Path,
) -> MasterPlan:
    """Pass 2's plan from pass 1's figures: one gain to the loudness target, or (acx)
    each chapter's gain to the RMS target of its own file, room tone included."""
    preset = PRESETS[options.preset] if options.preset else None
    encoding = Encoding(options.format, rate, rate)
    if preset is None or preset.rms_target is None:
        gain = gain_for(loudness, options.loudness_lufs)
        return MasterPlan(
            encoding, chapters, spans, [gain] * len(spans), limiter_ceiling(preset), tags
        )
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
