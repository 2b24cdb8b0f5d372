"""The render builder: two streaming passes over a job's audio, under a renewed lock.

Pass 1 decodes the items one by one (in position order, a page of rows at a time): it
measures the loudness of the whole file as it will sound (items and gaps), places each
item on the timeline and writes its caption cues. Pass 2 decodes the same audio again,
applies the one gain that brings the file to its target loudness and encodes it, item by
item, into a temporary file. Memory holds one decoded frame, the loudness histogram and
one (path, length) pair per item, whatever the length of the job. No transaction is open
while audio is decoded, encoded or uploaded.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechbatch.adapters.audio import RATE, AudioWriter, LoudnessMeter, decode, gain_for
from speechbatch.adapters.repositories.renders import RenderFiles, RenderItem
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.domain.renders import (
    VTT_HEADER,
    ChapterMark,
    RenderOptions,
    Timeline,
    srt_cue,
    vtt_cue,
)
from speechbatch.services.lock_lease import LeasedBuilder, LeaseLost, LockLease
from speechbatch.services.ports import Storage
from speechbatch.services.render_events import record_render_event

log = logging.getLogger(__name__)

PAGE = 200  # item rows read per query
WORKDIR_PREFIX = "speechbatch-render-"


@dataclass(frozen=True)
class RenderTask:
    """What a builder needs: the render, its job, and the grant that fences its writes."""

    render_id: int
    organization_id: int
    job_id: int
    job_title: str
    items: int
    lock_id: int
    holder: str
    ttl_seconds: float
    options: RenderOptions


@dataclass(frozen=True)
class _Source:
    """One item's audio as pass 1 found it; pass 2 must find the same length."""

    position: int
    audio_path: str
    samples: int


@dataclass(frozen=True)
class _Measured:
    sources: list[_Source]
    timeline: Timeline
    loudness: float


def render_keys(task: RenderTask) -> dict[str, str]:
    """Where a render's audio and captions live (only the job's lock holder writes them)."""
    base = f"renders/{task.organization_id}/job-{task.job_id}/render-{task.render_id}"
    return {"audio": f"{base}.{task.options.format}", "vtt": f"{base}.vtt", "srt": f"{base}.srt"}


class RenderBuilder(LeasedBuilder):
    """Builds one render in a background thread while renewing its lock."""

    kind = "render"

    def __init__(self, uow_factory: UowFactory, storage: Storage, task: RenderTask) -> None:
        lease = LockLease(
            uow_factory,
            task.lock_id,
            task.holder,
            task.ttl_seconds,
            still_running=lambda uow: uow.renders.is_running(task.render_id, task.lock_id),
        )
        super().__init__(lease, task.render_id)
        self._uow_factory = uow_factory
        self._storage = storage
        self.task = task

    def build(self) -> None:
        _sweep_dead_workdirs()
        workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
        try:
            files = {
                "audio": workdir / f"render.{self.task.options.format}",
                "vtt": workdir / "captions.vtt",
                "srt": workdir / "captions.srt",
            }
            measured = self._measure(files["vtt"], files["srt"])
            chapters = measured.timeline.chapters()
            gain = gain_for(measured.loudness, self.task.options.loudness_lufs)
            self._encode(files["audio"], measured, chapters, gain)
            self._publish(files, measured.timeline, chapters)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _measure(self, vtt_path: Path, srt_path: Path) -> _Measured:
        """Pass 1: durations, loudness, and the captions, item by item."""
        task = self.task
        with self._uow_factory(read_only=True) as uow:
            titles = uow.renders.chapter_titles(task.job_id)
        timeline = Timeline(RATE, task.options, titles, task.job_title)
        meter = LoudnessMeter(RATE)
        measure = task.options.loudness_lufs is not None
        sources: list[_Source] = []
        after = 0
        with (
            vtt_path.open("w", encoding="utf-8") as vtt,
            srt_path.open("w", encoding="utf-8") as srt,
        ):
            vtt.write(VTT_HEADER)
            while page := self._items(after):
                for item in page:
                    self.lease.renew()
                    gap = timeline.gap_before(item.position)
                    samples = 0
                    with self._storage.open(item.audio_path) as source:
                        if measure:
                            meter.add(np.zeros(gap, dtype=np.float32))
                        for piece in decode(source):
                            if measure:
                                meter.add(piece)
                            samples += piece.size
                    cue = timeline.place(item.position, item.text, samples)
                    sources.append(_Source(item.position, item.audio_path, samples))
                    vtt.write(vtt_cue(len(sources), cue))
                    srt.write(srt_cue(len(sources), cue))
                after = page[-1].position
        if len(sources) != task.items:
            raise RuntimeError(
                f"the job changed during the render ({len(sources)} of {task.items} items done)"
            )
        return _Measured(sources, timeline, meter.integrated())

    def _items(self, after: int) -> list[RenderItem]:
        """The next page of the job's items, in a short read of its own."""
        with self._uow_factory(read_only=True) as uow:
            return uow.renders.render_items(self.task.job_id, after, PAGE)

    def _encode(
        self, path: Path, measured: _Measured, chapters: list[ChapterMark], gain: float
    ) -> None:
        """Pass 2: the same audio again, with the gain, encoded item by item."""
        timeline = Timeline(RATE, self.task.options, measured.timeline.chapter_titles, "")
        with AudioWriter(path, self.task.options.format, RATE, chapters) as writer:
            for source in measured.sources:
                self.lease.renew()
                writer.silence(timeline.gap_before(source.position))
                samples = 0
                with self._storage.open(source.audio_path) as audio:
                    for piece in decode(audio):
                        samples += piece.size
                        writer.write(np.clip(piece * gain, -1.0, 1.0))
                if samples != source.samples:
                    raise RuntimeError(f"the audio of item {source.position} changed")
                timeline.place(source.position, "", samples)

    def _publish(
        self, files: dict[str, Path], timeline: Timeline, chapters: list[ChapterMark]
    ) -> None:
        """Upload the files while the grant is ours, then complete the render (fenced)."""
        task = self.task
        keys = render_keys(task)
        self.lease.renew(force=True)
        for kind, key in keys.items():
            self._storage.write_file(key, files[kind])
        self.lease.renew(force=True)
        result = RenderFiles(
            file_path=keys["audio"],
            vtt_path=keys["vtt"],
            srt_path=keys["srt"],
            duration_seconds=timeline.duration_seconds,
            chapters=[c.as_json() for c in chapters],
        )
        try:
            with self._uow_factory() as uow:
                won = uow.renders.complete_render(task.render_id, task.lock_id, task.holder, result)
                if won:
                    self._record_event(uow)
                    uow.commit()
        except BaseException:
            self._delete(keys)
            raise
        if not won:
            # Declared dead meanwhile: the files are nobody's.
            self._delete(keys)
            raise LeaseLost()
        log.info(
            "render completed render=%s job=%s seconds=%.1f",
            task.render_id,
            task.job_id,
            timeline.duration_seconds,
        )

    def _record_event(self, uow: WriteUnit) -> None:
        """Tell the render's end, in the transaction that ends it."""
        task = self.task
        record = uow.renders.get_render(task.render_id, task.job_id, task.organization_id)
        if record is not None:
            record_render_event(uow, record)

    def _delete(self, keys: dict[str, str]) -> None:
        for key in keys.values():
            self._storage.delete(key)

    def fail(self, message: str) -> None:
        task = self.task
        try:
            with self._uow_factory() as uow:
                if uow.renders.fail_render(task.render_id, task.lock_id, message):
                    self._record_event(uow)
                uow.locks.release(task.lock_id)
                uow.commit()
        except Exception:
            # Recovery finds it once the lease has run out.
            log.exception("could not record the failure of render %s", task.render_id)


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
