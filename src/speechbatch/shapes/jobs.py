"""A job, its items, runs and takes, and the bodies that make and change them."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, TypedDict

from speechbatch.domain.editing import MAX_INSTRUCTIONS, MAX_SPEED, MIN_SPEED
from speechbatch.domain.limits import (
    MAX_CAST,
    MAX_ITEM_CHARACTERS,
    MAX_ITEMS,
    MAX_KEY,
    MAX_SPEAKER,
    MAX_TITLE,
    MIN_ITEM_CHARACTERS,
)
from speechbatch.domain.statuses import ItemStatus, JobStatus, RunOutcome
from speechbatch.domain.text import invisible_class
from speechbatch.shapes.common import (
    NO_NUL,
    NOT_BLANK,
    ApiUrl,
    Count,
    Id,
    Seconds,
    Timestamp,
)
from speechbatch.shapes.schema import Configured, Schema, object_keywords

Suspect = Literal["silent", "too_short", "too_long"]
# Chapter indexes as repeated form fields: well under the 1,000 parts a form may have.
MAX_CHAPTER_FIELDS = 500
RunKind = Literal["generate", "regenerate", "resume"]
# One of the deployment's voices (the document lists them).
Voice = Annotated[str, Configured("voice")]
# An item's text: not blank, within the provider's limit.
ItemText = Annotated[str, Schema(pattern=NOT_BLANK), Configured("item_text")]
# A title: text with a visible character (the server's own test, as ranges of the Basic
# Multilingual Plane: a pattern's other characters are not portable).
VISIBLE = f"^[^\\u0000]*[^{invisible_class()}][^\\u0000]*$"
Title = Annotated[str, Schema(maxLength=MAX_TITLE, pattern=VISIBLE)]
# A book's author: one line (blank clears it).
Author = Annotated[str, Schema(maxLength=MAX_TITLE, pattern="^[^\\x00-\\x1f\\x7f]*$")]
# A speaker's name: text with a visible character (as a title), at most MAX_SPEAKER.
_SPEAKER = {"maxLength": MAX_SPEAKER, "pattern": VISIBLE}
Speaker = Annotated[str, Schema(**_SPEAKER)]
# A job's cast: each speaker's voice (their lines are spoken with it).
Cast = Annotated[dict[str, Voice], Schema(maxProperties=MAX_CAST, propertyNames=_SPEAKER)]
# A key, trimmed: 1 to MAX_KEY of A-Z a-z 0-9 . _ - (surrounding whitespace is allowed).
Key = Annotated[str, Schema(pattern=f"^[ \\t\\n\\r]*[A-Za-z0-9._-]{{1,{MAX_KEY}}}[ \\t\\n\\r]*$")]


@object_keywords(additionalProperties=False)
class Options(TypedDict, total=False):
    """A job's options: what the provider is asked besides the text."""

    speed: Annotated[float, Schema(minimum=MIN_SPEED, maximum=MAX_SPEED)]
    instructions: Annotated[str, Schema(maxLength=MAX_INSTRUCTIONS, pattern=NO_NUL)]


class Progress(TypedDict):
    """How many of the job's items are in each state, stale and suspect."""

    total: Count
    pending: Count
    generating: Count
    done: Count
    error: Count
    stale: Count
    suspect: Count


class Chapter(TypedDict):
    """A chapter: the run of items from ``first_position`` on."""

    index: Count
    title: str
    first_position: Annotated[int, Schema(minimum=1)]
    items: Count


class Item(TypedDict):
    """One line of a job."""

    id: Id
    position: Count
    key: str | None
    chapter: Count | None
    # Who says the line (the cast gives their voice); null: the narrator (the job's voice).
    speaker: str | None
    text: str
    # The text as the organization's lexicon has it spoken now (what a run sends); null
    # when a rule runs out of time on it (a run would end the item ERROR).
    spoken_text: str | None
    status: ItemStatus
    error_message: str | None
    audio_url: ApiUrl | None
    reused: bool
    stale: bool
    duration_seconds: Seconds | None
    suspect: Suspect | None
    updated_at: Timestamp


class Run(TypedDict):
    """One claim of the job and how it ended; who started and cancelled it, what it billed
    (recorded before each call) and the worker (host:pid) that ran it."""

    attempt: Annotated[int, Schema(minimum=1)]
    kind: RunKind
    outcome: RunOutcome
    selected: Count | None
    started_at: Timestamp
    finished_at: Timestamp | None
    error_message: str | None
    started_by: str | None
    cancelled_by: str | None
    billed_characters: Count
    provider_calls: Count
    worker: str | None


class Lease(TypedDict):
    """The live run's lease, and how many items wait for the deployment's provider slots
    or pace (so a slow job reads as alive and says why)."""

    worker: str | None
    last_progress_at: Timestamp
    reclaim_count: Count
    lease_seconds: float
    worker_dead_seconds: float
    expires_at: Timestamp | None
    waiting_for_slot: Count
    waiting_for_pace: Count


class JobSummary(TypedDict):
    """A job without its items and runs."""

    id: Id
    title: str
    # The book's author and cover, which a render writes into its tags.
    author: str | None
    cover_url: ApiUrl | None
    voice: str
    # Who speaks in which voice; a line without a speaker, or whose speaker is not in the
    # cast, is spoken with ``voice``.
    cast: dict[str, str]
    status: JobStatus
    attempt: Count
    error_message: str | None
    created_at: Timestamp
    updated_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    options: Options
    chapters: list[Chapter]
    progress: Progress


class Job(JobSummary):
    """A job with its runs and lease, and its items unless ``?items=none``."""

    items: NotRequired[list[Item]]
    runs: list[Run]
    lease: Lease


class JobList(TypedDict):
    """One page of the organization's jobs, newest first."""

    jobs: list[JobSummary]
    total: Count
    page: Annotated[int, Schema(minimum=1)]
    per_page: Annotated[int, Schema(minimum=1, maximum=200)]


class ItemPage(TypedDict):
    """One slice of a job's items, in position order, and how many there are."""

    items: list[Item]
    total: Count


class Take(TypedDict):
    """One audio an item has had."""

    take: Annotated[int, Schema(minimum=1)]
    text: str
    spoken_text: str
    voice: str
    audio_url: ApiUrl
    duration_seconds: Seconds | None
    reused: bool
    created_at: Timestamp
    current: bool


class TakeList(TypedDict):
    """An item's kept takes, newest first."""

    takes: list[Take]


class TimedSpan(TypedDict):
    """A sentence or a word of a take and where its speech starts and ends in the take's audio."""

    text: str
    start_seconds: Seconds
    end_seconds: Seconds


class ItemTiming(TypedDict):
    """Where each sentence (and word, when ``level`` is ``word``) of the current take is spoken."""

    level: Literal["word", "sentence"]
    sentences: list[TimedSpan]
    words: list[TimedSpan] | None


@object_keywords(additionalProperties=False)
class KeyedItem(TypedDict):
    """An item with a key (unique in the job) and/or a speaker."""

    text: ItemText
    key: NotRequired[Key]
    speaker: NotRequired[Speaker]


class NewJob(TypedDict):
    """A job to create: its items are texts, or texts with keys."""

    title: Title
    voice: Voice
    items: Annotated[list[ItemText | KeyedItem], Schema(minItems=1, maxItems=MAX_ITEMS)]
    options: NotRequired[Options]
    author: NotRequired[Author | None]
    cast: NotRequired[Cast]


class DocumentUpload(TypedDict):
    """A document (multipart): ``file`` is a .txt, .md or .epub upload (its file name says
    which; without one, a ZIP is read as EPUB and anything else as text)."""

    file: Annotated[str, Schema(format="binary")]


class ImportJob(TypedDict):
    """A document to import (multipart): ``file`` is a .txt, .md or .epub upload (its file
    name says which; without one, a ZIP is read as EPUB and anything else as text).
    Without a title, the document's own names the job (an EPUB's ``dc:title``, Markdown's
    first level-1 heading, else the file's name); without an author, an EPUB's
    ``dc:creator``. ``chapters`` are indexes into the document's chapters (as
    ``importChoices`` lists them) to keep; without it, all but an EPUB's front and back
    matter. A form has at most 1,000 parts (413 beyond): more indexes than this array's
    500 go as one field, a comma-separated list or a JSON array. With ``format`` "script",
    a .txt or .md file of ``NAME: text`` lines: one item per line, said by NAME (other
    lines are narration)."""

    file: Annotated[str, Schema(format="binary")]
    voice: Voice
    title: NotRequired[Title]
    author: NotRequired[Author]
    chapters: NotRequired[Annotated[list[Count], Schema(minItems=1, maxItems=MAX_CHAPTER_FIELDS)]]
    max_characters: NotRequired[
        Annotated[
            int,
            Schema(minimum=MIN_ITEM_CHARACTERS, maximum=MAX_ITEM_CHARACTERS),
            Configured("max_characters"),
        ]
    ]
    format: NotRequired[Literal["document", "script"]]


class DocumentChapter(TypedDict):
    """A chapter of a document: whether the import keeps it (offered before an import:
    whether it would by default), and whether it is front or back matter (a cover, title
    page, imprint, colophon or copyright page)."""

    index: Count
    title: str
    kept: bool
    front_back_matter: bool


class DocumentChoices(TypedDict):
    """A document's own title and author (null where it names none), and its chapters."""

    title: str | None
    author: str | None
    chapters: list[DocumentChapter]


class ImportedJob(Job):
    """A job just imported, with every chapter of its document and whether it was kept
    (``document`` is absent only from an answer rebuilt for a repeated Idempotency-Key
    whose first request never answered)."""

    document: NotRequired[DocumentChoices]


@object_keywords(additionalProperties=False, minProperties=1)
class JobChange(TypedDict, total=False):
    """A new voice, options, author and/or cast for a job (null clears the author; the
    cast is merged: each speaker named gets that voice, null takes one out)."""

    voice: Voice
    options: Options
    author: Author | None
    cast: Annotated[dict[str, Voice | None], Schema(maxProperties=MAX_CAST, propertyNames=_SPEAKER)]


class ItemEdit(TypedDict):
    """An item's new text."""

    text: ItemText


@object_keywords(**{"not": {"required": ["items", "stale"]}})
class Selection(TypedDict, total=False):
    """What a regenerate sends: the items named, or every stale one (never both)."""

    items: Annotated[
        list[Annotated[int, Schema(minimum=1, maximum=2**63 - 1)]],
        Schema(minItems=1, maxItems=MAX_ITEMS),
    ]
    stale: bool
