"""The document's job calls: the list, create and import, one job, its runs, its items,
their audio and takes."""

from __future__ import annotations

from typing import Annotated, Any

from speechbatch.domain.statuses import ItemStatus, JobStatus
from speechbatch.shapes import jobs as shapes
from speechbatch.shapes.outputs import Estimate
from speechbatch.shapes.schema import Schema
from speechbatch.web.openapi.operations import (
    ETAG_HEADERS,
    IF_NONE_MATCH,
    NO_CONTENT,
    NOT_MODIFIED,
    answer,
    download,
    errors,
    file_path,
    operation,
    path_id,
    query,
)

JOB_ID = path_id("job_id", "job")
ITEM_ID = path_id("item_id", "item")
TAKE = {**path_id("take", "take"), "description": "The take's number (from 1)."}
JOB_LINKS = {
    name: "job_id"
    for name in ("getJob", "generateJob", "regenerateJob", "cancelJob", "estimateJob", "listItems")
}
Page = Annotated[int, Schema(minimum=1)]
PerPage = Annotated[int, Schema(minimum=1, maximum=200)]
Search = Annotated[str, Schema(maxLength=200)]
Flag = Annotated[str, Schema(enum=["0", "1"])]
FLAG_QUERY = [
    query(flag, f"`1`: only {flag} items (not with `status`).", Flag)
    for flag in ("stale", "suspect")
]
ItemIds = Annotated[str, Schema(pattern="^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17})*$")]


def _start(operation_id: str, summary: str, conflicts: str, **body: Any) -> dict[str, Any]:
    """A claim of the job (generate, regenerate)."""
    unprocessable = (422,) if body else ()
    claim = operation(
        operation_id,
        summary,
        {
            "202": answer(shapes.Job, "The claimed job, GENERATING with a new attempt."),
            **errors(400, 401, 404, 409, *unprocessable),
        },
        **body,
    )
    return {"parameters": [JOB_ID], "post": claim | {"description": conflicts}}


def _list_jobs() -> dict[str, Any]:
    return operation(
        "listJobs",
        "The organization's jobs, newest first, after recovery of dead runs.",
        {
            "200": answer(shapes.JobList, "One page of job summaries.", ETAG_HEADERS),
            **NOT_MODIFIED,
            **errors(401, 422),
        },
        parameters=[
            query("status", "Only jobs in this state.", JobStatus),
            query("q", "Only jobs whose title contains this (case-blind).", Search),
            query("page", "Page number, from 1.", Page),
            query("per_page", "Jobs per page (default 50).", PerPage),
            IF_NONE_MATCH,
        ],
    )


def _jobs() -> dict[str, Any]:
    """The list, create and import."""
    created = answer(shapes.Job, "The new job.", links=JOB_LINKS)
    return {
        "/api/jobs": {
            "get": _list_jobs(),
            "post": operation(
                "createJob",
                "Create a PENDING job. Titles and items are trimmed first.",
                {"201": created, **errors(400, 401, 413, 422)},
                body=shapes.NewJob,
            ),
        },
        "/api/jobs/import": {
            "post": operation(
                "importJob",
                "Create a PENDING job from a document (.txt, .md, .epub): chapters from its "
                "headings or table of contents (those asked for, by default all but an "
                "EPUB's front and back matter), prose packed into items of at most "
                "max_characters (default 1500) without cutting a sentence that fits, "
                "nothing dropped.",
                {
                    "201": answer(shapes.ImportedJob, "The new job.", links=JOB_LINKS),
                    **errors(400, 401, 413, 422),
                },
                body=shapes.ImportJob,
                multipart=True,
            ),
        },
        "/api/jobs/import/chapters": {
            "post": operation(
                "importChoices",
                "What importing a document would offer, storing nothing: its own title and "
                "author and its chapters, with whether an import keeps each by default.",
                {
                    "200": answer(shapes.DocumentChoices, "The document's chapters."),
                    **errors(400, 401, 413, 422),
                },
                body=shapes.DocumentUpload,
                multipart=True,
            ),
        },
    }


def _job() -> dict[str, Any]:
    """One job: read, change, delete, and its runs."""
    job = answer(shapes.Job, "The job.")
    return {
        "/api/jobs/{job_id}": {
            "parameters": [JOB_ID],
            "get": operation(
                "getJob",
                "One job, after lease-expiry recovery.",
                {
                    "200": answer(shapes.Job, "The job.", ETAG_HEADERS),
                    **NOT_MODIFIED,
                    **errors(401, 404, 422),
                },
                parameters=[
                    query(
                        "items",
                        "`none` leaves `items` out; `all` (the default) keeps them.",
                        Annotated[str, Schema(enum=["all", "none"])],
                    ),
                    IF_NONE_MATCH,
                ],
            ),
            "patch": operation(
                "changeJob",
                "Change the job's voice and/or options; its items with audio become stale.",
                {"200": job, **errors(400, 401, 404, 405, 409, 422)},
                body=shapes.JobChange,
            ),
            "delete": operation(
                "deleteJob",
                "Delete a job that is not GENERATING, with its items, runs and takes.",
                {**NO_CONTENT, **errors(400, 401, 404, 405, 409)},
            ),
        },
    }


def _runs() -> dict[str, Any]:
    """A job's claims, cancel and estimate."""
    return {
        "/api/jobs/{job_id}/generate": _start(
            "generateJob",
            "Claim the job and send every item that is not DONE.",
            "409 `already_generating`, `nothing_to_generate` (every item DONE) or"
            " `budget_exceeded`.",
        ),
        "/api/jobs/{job_id}/regenerate": _start(
            "regenerateJob",
            "Claim the job and send every item again (each is billed again), or only the"
            " items of an optional selection.",
            "409 `already_generating`, `budget_exceeded`, or `nothing_to_generate` (no item"
            " is stale); 422 when `items` names an item that is not the job's.",
            body=shapes.Selection,
            body_required=False,
        ),
        "/api/jobs/{job_id}/cancel": {
            "parameters": [JOB_ID],
            "post": operation(
                "cancelJob",
                "End the live run at once: the job becomes FAILED, its run CANCELLED.",
                {"200": answer(shapes.Job, "The job."), **errors(400, 401, 404, 409)},
            ),
        },
        "/api/jobs/{job_id}/estimate": {
            "parameters": [JOB_ID],
            "get": operation(
                "estimateJob",
                "What Generate (or Regenerate) would send and bill now.",
                {"200": answer(Estimate, "The estimate."), **errors(401, 404, 422)},
                parameters=[
                    query(
                        "regenerate",
                        "`1` (or `true`, `yes`) estimates Regenerate; absent or any other"
                        " value, Generate.",
                        str,
                    ),
                    query(
                        "items",
                        "Comma-separated item ids: estimate a regenerate of only those items.",
                        ItemIds,
                    ),
                    query("stale", "`1`: estimate a regenerate of the stale items.", Flag),
                ],
            ),
        },
    }


def _items() -> dict[str, Any]:
    """A job's items, an item's edit, audio and takes."""
    limit = Annotated[int, Schema(minimum=1, maximum=1000)]
    return {
        "/api/jobs/{job_id}/items": {
            "parameters": [JOB_ID],
            "get": operation(
                "listItems",
                "A job's items in position order.",
                {
                    "200": answer(shapes.ItemPage, "One slice of the items.", ETAG_HEADERS),
                    **NOT_MODIFIED,
                    **errors(401, 404, 422),
                },
                parameters=[
                    query("status", "Only items in this state.", ItemStatus),
                    *FLAG_QUERY,
                    query("offset", "Items to skip.", Annotated[int, Schema(minimum=0)]),
                    query("limit", "Items to return (default 100).", limit),
                    IF_NONE_MATCH,
                ],
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}": {
            "parameters": [JOB_ID, ITEM_ID],
            "patch": operation(
                "editItem",
                "Give an item a new text: PENDING, its current audio kept and stale.",
                {"200": answer(shapes.Job, "The job."), **errors(400, 401, 404, 405, 409, 422)},
                body=shapes.ItemEdit,
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/audio": file_path(
            [JOB_ID, ITEM_ID],
            "getItemAudio",
            "An item's audio.",
            download("The audio bytes.", "audio/mpeg"),
        ),
        **_takes(),
    }


def _takes() -> dict[str, Any]:
    return {
        "/api/jobs/{job_id}/items/{item_id}/takes": {
            "parameters": [JOB_ID, ITEM_ID],
            "get": operation(
                "listTakes",
                "The item's kept takes, newest first.",
                {"200": answer(shapes.TakeList, "The takes."), **errors(401, 404)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/timing": {
            "parameters": [JOB_ID, ITEM_ID],
            "get": operation(
                "getItemTiming",
                "Where each sentence (and word, where known) of the current take is spoken.",
                {"200": answer(shapes.ItemTiming, "The timing."), **errors(401, 404)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/takes/{take}/restore": {
            "parameters": [JOB_ID, ITEM_ID, TAKE],
            "post": operation(
                "restoreTake",
                "Make a kept take the item's audio (and text) again, without a provider call.",
                {"200": answer(shapes.Job, "The job."), **errors(400, 401, 404, 409)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/takes/{take}/audio": file_path(
            [JOB_ID, ITEM_ID, TAKE],
            "getTakeAudio",
            "A kept take's audio.",
            download("The audio bytes.", "audio/mpeg"),
        ),
    }


def job_paths() -> dict[str, Any]:
    """Every job call."""
    return {**_jobs(), **_job(), **_runs(), **_items()}
