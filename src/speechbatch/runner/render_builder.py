"""The render builder: two streaming passes over a job's audio, under a renewed lock.

Pass 1 decodes the items one by one (in position order, a page of rows at a time): it
measures the loudness of the whole file as it will sound (items and gaps), places each
item on the timeline and writes its caption cues (subtitles cut from its text and timed
from its take's timing, ``domain.captions``). An item of several paragraphs is spliced
as it is decoded: the audio between its paragraphs (found in its take's timing) becomes
``paragraph_gap_ms`` of silence, and its timing moves with it (``domain.paragraphs``);
cutting at render time leaves takes, reuse and billing alone, and lets each render
choose its gap. Pass 2 decodes the same audio again, applies the one gain that brings
the file to its target loudness and encodes it, item by item, into a temporary file.
That gain makes up for what the true-peak limiter will take off the loudness, measured
before pass 2 on a sample of the items (``mastering.made_up``). Memory holds one decoded
frame, the loudness histogram and one (path, length) pair per item, whatever the length
of the job. No transaction is open while audio is decoded, encoded or uploaded.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from speechbatch.adapters.audio import RATE, LoudnessMeter, decode
from speechbatch.adapters.audio.master import Master, MasterPlan
from speechbatch.adapters.audio.mastering import (
    LossAt,
    check_render,
    limiter_loss,
    pack_chapter_files,
    plan_master,
)
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.adapters.audio.splice import spliced
from speechbatch.adapters.read_along import book_chapters, write_read_along
from speechbatch.adapters.repositories.renders import RenderFiles, RenderItem
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.domain.book_source import source_key
from speechbatch.domain.captions import item_cues, item_pieces
from speechbatch.domain.paragraphs import Splice, paragraph_splices, spliced_timing
from speechbatch.domain.read_along import Passage, language_of
from speechbatch.domain.renders import (
    VTT_HEADER,
    ChapterMark,
    Tags,
    Timeline,
    narrator_of,
    srt_cue,
    vtt_cue,
)
from speechbatch.domain.timing import Timing, timing_from_json
from speechbatch.runner.lease import LeasedBuilder
from speechbatch.services.ports import RenderTask, Storage
from speechbatch.services.render_events import record_render_event

log = logging.getLogger(__name__)

PAGE = 200  # item rows read per query
# The limiter's loss is measured on items spread over the job, this much audio at most:
# a book's speech loses about the same everywhere, and each trial decodes them again.
TRIAL_SECONDS = 300.0
WORKDIR_PREFIX = "speechbatch-render-"


@dataclass(frozen=True)
class _Source:
    """One item's audio as pass 1 found it; pass 2 must find the same length."""

    position: int
    audio_path: str
    samples: int  # once spliced
    splices: tuple[Splice, ...] = ()


@dataclass(frozen=True)
class _Measured:
    sources: list[_Source]
    timeline: Timeline
    loudness: float
    energies: list[float]  # each chapter's sum of squares (acx sets each one's RMS)


def _timing(item: RenderItem) -> Timing | None:
    """The item's take's timing, when it was measured."""
    return timing_from_json(json.loads(item.timing)) if item.timing else None


def render_keys(task: RenderTask) -> dict[str, str]:
    """Where a render's audio and captions live (only the job's lock holder writes them)."""
    base = f"renders/{task.organization_id}/job-{task.job_id}/render-{task.render_id}"
    keys = {"audio": f"{base}.{task.options.format}", "vtt": f"{base}.vtt", "srt": f"{base}.srt"}
    return keys | {"zip": f"{base}-chapters.zip"}


class RenderBuilder(LeasedBuilder):
    """Builds one render in a background thread while renewing its lock."""

    kind = "render"

    def __init__(self, uow_factory: UowFactory, storage: Storage, task: RenderTask) -> None:
        super().__init__(
            uow_factory,
            storage,
            task.render_id,
            lock_id=task.lock_id,
            holder=task.holder,
            ttl_seconds=task.ttl_seconds,
        )
        self.task = task

    def still_running(self, uow: WriteUnit) -> bool:
        return uow.renders.is_running(self.task.render_id, self.task.lock_id)

    def build(self) -> None:
        _sweep_dead_workdirs()
        workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
        try:
            # An EPUB is built around an MP3 of the same render, with its text's timing.
            options = replace(self.task.options, format=self.task.options.audio_format)
            files = {
                "audio": workdir / f"render.{options.format}",
                "vtt": workdir / "captions.vtt",
                "srt": workdir / "captions.srt",
            }
            tags = self._tags()
            passages: list[tuple[int, Passage]] | None = None
            if self.task.options.format == "epub":
                passages = []
            measured = self._measure(files["vtt"], files["srt"], passages)
            timeline = measured.timeline
            chapters = timeline.chapters()
            plan = plan_master(
                options, RATE, chapters, timeline.chapter_spans(), measured.loudness,
                measured.energies, tags, workdir, self._limiter_loss(measured.sources),
            )  # fmt: skip
            self._encode(files["audio"], measured, plan)
            check = check_render(plan, options, files["audio"], self.lease.renew)
            if plan.chapter_files:
                files["zip"] = workdir / "chapters.zip"
                pack_chapter_files(plan, files["zip"], self.lease.renew)
            if passages is not None:
                files["audio"] = workdir / "render.epub"
                self.lease.renew()
                write_read_along(
                    files["audio"], workdir / "render.mp3", tags, self.task.render_id,
                    book_chapters(chapters, passages), self._source(), self.lease.renew,
                )  # fmt: skip
            self._publish(files, timeline, chapters, check)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _tags(self) -> Tags:
        """The job's title, author, narrator, year and cover as the render begins (a cover
        replaced meanwhile, whose file is then deleted, is read again)."""
        for attempt in (1, 2):
            with self._uow_factory(read_only=True) as uow:
                book = uow.books.book_info(self.task.render_id, self.task.job_id)
            try:
                cover = self._read(book.cover_path)
            except FileNotFoundError:
                if attempt == 2:
                    raise
                continue
            return Tags(
                title=book.title, album=book.title, author=book.author,
                narrator=narrator_of(book.voices), year=book.year, cover=cover,
                cover_type=book.cover_type if cover else None, language=language_of(book.voices[0]),
            )  # fmt: skip
        raise AssertionError("unreachable")

    def _source(self) -> bytes | None:
        """The EPUB the job was imported from, when it was."""
        try:
            return self._read(source_key(self.task.organization_id, self.task.job_id))
        except FileNotFoundError:
            return None

    def _read(self, key: str | None) -> bytes | None:
        if key is None:
            return None
        with self._storage.open(key) as source:
            return source.read()

    def _measure(
        self, vtt_path: Path, srt_path: Path, passages: list[tuple[int, Passage]] | None
    ) -> _Measured:
        """Pass 1: durations, loudness, and the captions, item by item; for a read-along
        book, each item's (chapter, passage) kept in ``passages``."""
        task = self.task
        with self._uow_factory(read_only=True) as uow:
            titles = uow.renders.chapter_titles(task.job_id)
        timeline = Timeline(RATE, task.options, titles, task.job_title)
        meter = LoudnessMeter(RATE)
        measure = task.options.loudness_lufs is not None
        sources: list[_Source] = []
        energies: list[float] = []
        after = cues = 0
        with (
            vtt_path.open("w", encoding="utf-8") as vtt,
            srt_path.open("w", encoding="utf-8") as srt,
        ):
            vtt.write(VTT_HEADER)
            while page := self._items(after):
                for item in page:
                    self.lease.renew()
                    chapter = timeline.chapter_of(item.position)
                    energies += [0.0] * (chapter + 1 - len(energies))
                    timing = _timing(item)
                    splices = paragraph_splices(
                        item.text, timing, task.options.paragraph_gap_ms, RATE
                    )
                    if measure:
                        meter.add(np.zeros(timeline.gap_before(item.position), dtype=np.float32))
                    samples = 0
                    for piece in self._decoded(item.audio_path, splices):
                        if measure:
                            meter.add(piece)
                        energies[chapter] += float(np.square(piece).sum())
                        samples += piece.size
                    placed = timeline.place(item.position, item.text, samples)
                    sources.append(_Source(item.position, item.audio_path, samples, splices))
                    timing = spliced_timing(timing, splices, RATE)
                    if passages is not None:
                        pieces = item_pieces(item.text, timing, placed.start, placed.end)
                        passages.append((chapter, Passage(item.position, placed, tuple(pieces))))
                    for cue in item_cues(item.text, timing, placed.start, placed.end):
                        cues += 1
                        vtt.write(vtt_cue(cues, cue))
                        srt.write(srt_cue(cues, cue))
                after = page[-1].position
        if len(sources) != task.items:
            raise RuntimeError(
                f"the job changed during the render ({len(sources)} of {task.items} items done)"
            )
        return _Measured(sources, timeline, meter.integrated(), energies)

    def _decoded(self, key: str, splices: tuple[Splice, ...]) -> Iterator[Samples]:
        """An item's audio as the render hears it: decoded, with its paragraph splices."""
        with self._storage.open(key) as source:
            yield from spliced(decode(source), splices)

    def _limiter_loss(self, sources: list[_Source]) -> LossAt:
        """The limiter's loss at a gain and a ceiling, measured on a sample of the items
        (every k-th, ``TRIAL_SECONDS`` of audio at most) with the render's gap between."""
        step = max(1, math.ceil(sum(s.samples for s in sources) / (TRIAL_SECONDS * RATE)))
        gap = np.zeros(round(RATE * self.task.options.gap_ms / 1000), dtype=np.float32)

        def pieces() -> Iterator[Samples]:
            for source in sources[::step]:
                self.lease.renew()
                yield gap
                yield from self._decoded(source.audio_path, source.splices)

        return lambda gain, ceiling_db: limiter_loss(pieces(), gain, ceiling_db, RATE)

    def _items(self, after: int) -> list[RenderItem]:
        """The next page of the job's items, in a short read of its own."""
        with self._uow_factory(read_only=True) as uow:
            return uow.renders.render_items(self.task.job_id, after, PAGE)

    def _encode(self, path: Path, measured: _Measured, plan: MasterPlan) -> None:
        """Pass 2: the same audio again, through the preset's gains and the limiter,
        encoded item by item."""
        timeline = Timeline(RATE, self.task.options, measured.timeline.chapter_titles, "")
        with Master(plan, path) as writer:
            for source in measured.sources:
                self.lease.renew()
                writer.silence(timeline.gap_before(source.position))
                samples = 0
                for piece in self._decoded(source.audio_path, source.splices):
                    samples += piece.size
                    writer.write(piece)
                if samples != source.samples:
                    raise RuntimeError(f"the audio of item {source.position} changed")
                timeline.place(source.position, "", samples)

    def _publish(
        self,
        files: dict[str, Path],
        timeline: Timeline,
        chapters: list[ChapterMark],
        check: dict[str, object],
    ) -> None:
        """Upload the files while the grant is ours, then complete the render (fenced)."""
        task = self.task
        keys = {kind: key for kind, key in render_keys(task).items() if kind in files}
        self.lease.renew(force=True)
        for kind, key in keys.items():
            self.publish(key, files[kind])
        self.lease.renew(force=True)
        result = RenderFiles(
            file_path=keys["audio"],
            vtt_path=keys["vtt"],
            srt_path=keys["srt"],
            duration_seconds=timeline.duration_seconds,
            chapters=[c.as_json() for c in chapters],
            check_report=check,
            zip_path=keys.get("zip"),
        )
        self.complete(lambda uow: self._completed(uow, result))
        log.info(
            "render completed render=%s job=%s seconds=%.1f",
            task.render_id,
            task.job_id,
            timeline.duration_seconds,
        )

    def _completed(self, uow: WriteUnit, result: RenderFiles) -> bool:
        """The render COMPLETED with ``result``, and its lock released, fenced by the
        grant; its event recorded when that won."""
        task = self.task
        if not uow.renders.complete_render(task.render_id, task.lock_id, task.holder, result):
            return False
        self._record_event(uow)
        return True

    def _record_event(self, uow: WriteUnit) -> None:
        """Tell the render's end, in the transaction that ends it."""
        task = self.task
        record = uow.renders.get_render(task.render_id, task.job_id, task.organization_id)
        if record is not None:
            record_render_event(uow, record)

    def end_failed(self, uow: WriteUnit, message: str) -> None:
        task = self.task
        if uow.renders.fail_render(task.render_id, task.lock_id, message):
            self._record_event(uow)


_PID = re.compile(rf"^{WORKDIR_PREFIX}(\d+)-")


def _sweep_dead_workdirs() -> None:
    """Remove the work folders of render processes that are gone (SIGKILLed mid-render)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        match = _PID.match(folder.name)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            continue  # alive, someone else's


def wait_for_renders(timeout: float) -> bool:
    """Wait until this process's render builders have ended; whether they all did in time."""
    return RenderBuilder.wait_for_all(timeout)
