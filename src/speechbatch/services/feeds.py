"""Podcast feeds: a secret, revocable URL per job that a podcast app subscribes to.

``open_feed`` makes a new secret for the job (a second call replaces the first: the old
URL answers 404 from then on, which is how a leaked URL is rotated); only its SHA-256 is
stored, so the URL is shown once, as API tokens are. ``close_feed`` revokes it. Every file
the feed names (audio, chapter files, JSON chapters, the WebVTT transcript, the cover)
is served under the same secret, without sign-in, and only for the feed's job: the feed
publishes the job's newest COMPLETED render, one episode per chapter file when the
render has them (the acx preset), else one episode.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from datetime import datetime, timedelta
from typing import Any, BinaryIO

from speechbatch.adapters.chapter_files import ChapterFile, chapter_sizes, open_chapter_file
from speechbatch.adapters.images import stored_type
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.feeds import FeedJob
from speechbatch.adapters.repositories.renders import RenderRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain import feeds as rss
from speechbatch.domain.presets import PRESETS
from speechbatch.domain.renders import CONTENT_TYPES, file_name
from speechbatch.domain.statuses import RenderStatus
from speechbatch.errors import NotFound
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)

FEED_TYPE = rss.FEED_TYPE
CHAPTERS_TYPE = rss.CHAPTERS_TYPE
FEED_NOT_FOUND = "no such feed (it may have been revoked or replaced)"


def feed_path(secret: str) -> str:
    """The root-relative path of a feed's document; its files live under ``/feeds/SECRET/``."""
    return f"/feeds/{secret}.xml"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_feed(uow_factory: UowFactory, user: UserRecord, job_id: int) -> str:
    """Give the job a new feed secret (replacing any it had) and return it: shown this
    once, stored hashed. NotFound for another organization's job."""
    secret = secrets.token_urlsafe(24)
    with uow_factory() as uow:
        if not uow.feeds.replace_feed(job_id, user.organization_id, _hash(secret)):
            raise NotFound("job not found")
        uow.commit()
    log.info("feed made job=%s user=%s", job_id, user.email)
    return secret


def close_feed(uow_factory: UowFactory, user: UserRecord, job_id: int) -> None:
    """Revoke the job's feed: its URLs answer 404 at once. NotFound without one."""
    with uow_factory() as uow:
        if not uow.feeds.delete_feed(job_id, user.organization_id):
            raise NotFound("this job has no feed")
        uow.commit()
    log.info("feed revoked job=%s user=%s", job_id, user.email)


def feed_made_at(uow_factory: UowFactory, user: UserRecord, job_id: int) -> datetime | None:
    """When the job's live feed was made, or None (the job page says whether it has one)."""
    with uow_factory(read_only=True) as uow:
        return uow.feeds.feed_created_at(job_id, user.organization_id)


def _job(uow_factory: UowFactory, secret: str) -> FeedJob:
    with uow_factory(read_only=True) as uow:
        job = uow.feeds.job_of_feed(_hash(secret))
    if job is None:
        raise NotFound(FEED_NOT_FOUND)
    return job


def _render(uow_factory: UowFactory, job: FeedJob, render_id: int) -> RenderRecord:
    with uow_factory(read_only=True) as uow:
        record = uow.renders.get_render(render_id, job.job_id, job.organization_id)
    if record is None or record.status != RenderStatus.COMPLETED:
        raise NotFound("render not found")
    return record


def _stored_size(storage: Storage, key: str) -> int:
    """A stored file's length: the store says it as it opens the file."""
    with storage.open(key) as source:
        size = getattr(source, "size", None)
        return size if isinstance(size, int) else os.fstat(source.fileno()).st_size


def feed_document(uow_factory: UowFactory, storage: Storage, secret: str, origin: str) -> bytes:
    """The feed's RSS document; every URL in it absolute under ``origin`` (the request's
    scheme and host). A job without a COMPLETED render is a show without episodes."""
    job = _job(uow_factory, secret)
    with uow_factory(read_only=True) as uow:
        render = uow.renders.newest_completed(job.job_id)
    root = f"{origin}/feeds/{secret}"
    episodes = [] if render is None else _episodes(storage, job, render, root)
    cover = None
    if job.cover_path:
        cover = f"{root}/cover.{job.cover_path.rsplit('.', 1)[-1]}"
    show = rss.Channel(
        title=job.title,
        link=origin + "/",
        author=job.author,
        description=f"{job.title}" + (f", by {job.author}" if job.author else ""),
        image_url=cover,
        episodes=episodes,
    )
    return rss.feed_xml(show)


def _episodes(storage: Storage, job: FeedJob, render: RenderRecord, root: str) -> list[rss.Episode]:
    """One episode for the render's file, or one per chapter file (acx)."""
    base = f"{root}/renders/{render.id}"
    published = render.finished_at or render.created_at
    kind = CONTENT_TYPES[render.format]
    assert render.file_path is not None
    if not render.zip_path:
        return [
            rss.Episode(
                guid=f"render-{render.id}",
                title=job.title,
                url=f"{base}/audio.{render.format}",
                length=_stored_size(storage, render.file_path),
                type=kind,
                seconds=render.duration_seconds or 0.0,
                published=published,
                chapters_url=f"{base}/chapters.json",
                transcript_url=f"{base}/captions.vtt",
            )
        ]
    preset = PRESETS[render.preset] if render.preset else None
    room = preset.head_seconds + preset.tail_seconds if preset else 0.0
    sizes = chapter_sizes(storage.open(render.zip_path))
    return [
        rss.Episode(
            guid=f"render-{render.id}-chapter-{number}",
            title=chapter["title"],
            url=f"{base}/chapters/{number}.{render.format}",
            length=size,
            type=kind,
            seconds=chapter["end_seconds"] - chapter["start_seconds"] + room,
            # A second apart, so that apps that sort by date keep the book's order.
            published=published + timedelta(seconds=number),
            number=number,
            transcript_url=f"{base}/chapters/{number}.vtt",
        )
        for number, (chapter, size) in enumerate(zip(render.chapters, sizes, strict=True), 1)
    ]


def feed_file(
    uow_factory: UowFactory, secret: str, render_id: int, kind: str
) -> tuple[str, str, str]:
    """A COMPLETED render's ``audio`` or ``vtt`` of the feed's job: key, type, name."""
    job = _job(uow_factory, secret)
    record = _render(uow_factory, job, render_id)
    if kind == "audio":
        key, content_type = record.file_path, CONTENT_TYPES[record.format]
    else:
        key, content_type = record.vtt_path, rss.TRANSCRIPT_TYPE
    assert key is not None
    return key, content_type, file_name(job.title, key.rsplit(".", 1)[-1])


def feed_cover(uow_factory: UowFactory, secret: str) -> tuple[str, str]:
    """The feed's job's cover: key and type; NotFound without one."""
    job = _job(uow_factory, secret)
    if job.cover_path is None:
        raise NotFound("this feed has no cover")
    return job.cover_path, stored_type(job.cover_path)


def feed_chapters(uow_factory: UowFactory, secret: str, render_id: int) -> dict[str, Any]:
    """A COMPLETED render's chapters as Podcasting 2.0 JSON chapters."""
    record = _render(uow_factory, _job(uow_factory, secret), render_id)
    return rss.json_chapters(record.chapters)


def feed_chapter_file(
    uow_factory: UowFactory, storage: Storage, secret: str, render_id: int, number: int
) -> tuple[BinaryIO, str, str]:
    """The ``number``-th chapter file (from 1) of a render with chapter files: a stream
    (the caller closes it), its type and name; NotFound otherwise."""
    job = _job(uow_factory, secret)
    record = _render(uow_factory, job, render_id)
    if not record.zip_path:
        raise NotFound("this render has no chapter files")
    member: ChapterFile | None = open_chapter_file(storage.open(record.zip_path), number)
    if member is None:
        raise NotFound("no such chapter file")
    title = record.chapters[number - 1]["title"] if number <= len(record.chapters) else job.title
    name = file_name(f"{number:02d} {title}", record.format)
    return member, CONTENT_TYPES[record.format], name  # type: ignore[return-value]


def feed_chapter_transcript(
    uow_factory: UowFactory, storage: Storage, secret: str, render_id: int, number: int
) -> str:
    """The WebVTT of the ``number``-th chapter file (from 1): the render's cues of that
    chapter, timed as the file plays them (after its room tone); NotFound otherwise."""
    record = _render(uow_factory, _job(uow_factory, secret), render_id)
    if not record.zip_path or not 1 <= number <= len(record.chapters) or not record.vtt_path:
        raise NotFound("this render has no such chapter file")
    chapter = record.chapters[number - 1]
    head = PRESETS[record.preset].head_seconds if record.preset else 0.0
    with storage.open(record.vtt_path) as source:
        vtt = source.read().decode("utf-8")
    start, end = chapter["start_seconds"], chapter["end_seconds"]
    return rss.chapter_transcript(vtt, start, end, head - start)
