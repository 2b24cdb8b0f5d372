"""What a job turns into and what it costs: renders, exports, estimates and usage."""

from __future__ import annotations

from typing import Annotated, NotRequired, TypedDict

from speechbatch.domain import paragraphs
from speechbatch.domain import renders as rules
from speechbatch.domain.presets import PRESETS
from speechbatch.domain.statuses import ExportStatus, RenderStatus
from speechbatch.shapes.common import ApiUrl, Count, Id, Seconds, Timestamp
from speechbatch.shapes.schema import Schema

RenderFormat = Annotated[str, Schema(enum=list(rules.FORMATS))]
RenderPreset = Annotated[str, Schema(enum=list(PRESETS))]
Level = Annotated[float, Schema(description="dB (LUFS, dBTP); -120 stands for silence")]


class RenderChapter(TypedDict):
    """A chapter marker: seconds in the file."""

    title: str
    start_seconds: Seconds
    end_seconds: Seconds


class Captions(TypedDict):
    """A render's caption files: WebVTT and SubRip."""

    vtt: ApiUrl
    srt: ApiUrl


class ChapterCheck(TypedDict):
    """One chapter's figures: its file's (acx), or its span of the whole file's."""

    title: str
    rms_db: Level
    true_peak_dbtp: Level
    seconds: Seconds


class Check(TypedDict):
    """A render measured on its decoded files, and what fails which rule (in words)."""

    integrated_lufs: Level
    true_peak_dbtp: Level
    rms_db: Level
    noise_floor_db: Level
    chapters: list[ChapterCheck]
    preset: RenderPreset | None
    passed: bool
    failures: list[str]


class Render(TypedDict):
    """One audio file of a whole job, with chapters and captions."""

    id: Id
    job_id: Id
    status: RenderStatus
    format: RenderFormat
    error_message: str | None
    duration_seconds: Seconds | None
    chapters: list[RenderChapter]
    download_url: ApiUrl | None
    captions: Captions | None
    created_at: Timestamp
    finished_at: Timestamp | None
    preset: RenderPreset | None
    check: Check | None
    # One file per chapter, in a ZIP (the acx preset's), once COMPLETED.
    chapter_files_url: ApiUrl | None


class RenderList(TypedDict):
    """A job's renders, newest first."""

    renders: list[Render]


class RenderRequest(TypedDict):
    """A render to start: its format, gaps and loudness, or a preset (which sets the
    loudness, and for acx the format: MP3). ``format`` is required without a preset."""

    format: NotRequired[RenderFormat]
    preset: NotRequired[RenderPreset | None]
    gap_ms: NotRequired[Annotated[int, Schema(minimum=0, maximum=rules.GAP_MS_MAX)]]
    chapter_gap_ms: NotRequired[Annotated[int, Schema(minimum=0, maximum=rules.CHAPTER_GAP_MS_MAX)]]
    # The silence at each paragraph break inside an item (default 700).
    paragraph_gap_ms: NotRequired[
        Annotated[int, Schema(minimum=0, maximum=paragraphs.PARAGRAPH_GAP_MS_MAX)]
    ]
    loudness_lufs: NotRequired[
        Annotated[float, Schema(minimum=rules.LOUDNESS_MIN, maximum=rules.LOUDNESS_MAX)] | None
    ]


class CoverStored(TypedDict):
    """A job's new cover: where it is served and its type."""

    cover_url: ApiUrl
    type: Annotated[str, Schema(enum=["image/jpeg", "image/png"])]


class FeedCreated(TypedDict):
    """A job's new podcast feed: its secret URL (absolute, shown this once)."""

    url: Annotated[str, Schema(pattern="^https?://[^/]+/feeds/[A-Za-z0-9_-]+[.]xml$")]


class Export(TypedDict):
    """A ZIP of the organization's finished audio."""

    id: Id
    status: ExportStatus
    error_message: str | None
    download_url: ApiUrl | None
    created_at: Timestamp
    finished_at: Timestamp | None


class Price(TypedDict):
    """An amount in the deployment's currency."""

    amount: float
    currency: str


class Estimate(TypedDict):
    """What a click would send and bill now."""

    items: Count
    characters: Count
    reused_items: Count
    # Lines the lexicon would make too long: a run ends them ERROR, unsent, unbilled.
    too_long_items: Count
    # Lines whose spoken text the background pass has not written yet: not counted.
    pending_items: Count
    price: Price | None


class ProviderUsage(TypedDict):
    """One provider's share of the month: what it billed (characters; bytes for
    Google) and the calls that went to it."""

    provider: str
    billed: Count
    calls: Count


class Usage(TypedDict):
    """The organization's billed characters this month (UTC) against its budget."""

    month: Annotated[str, Schema(pattern="^[0-9]{4}-[0-9]{2}$")]
    billed_characters: Count
    provider_calls: Count
    budget_characters: Count | None
    remaining_characters: int | None
    # Included in the billed figures: requests written whose answers were lost.
    in_doubt_calls: Count
    in_doubt_characters: Count
    # The same month broken down by provider, by name.
    providers: list[ProviderUsage]
