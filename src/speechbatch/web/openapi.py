"""The OpenAPI 3.1 document of the JSON API, kept next to the code it describes.

``GET /api/openapi.json`` serves it without authentication. A test runs schemathesis
against a live server with it: every answer must conform, and none may be a 5xx.
Change a route or an answer's shape here in the same commit.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from speechbatch.domain.editing import MAX_INSTRUCTIONS, MAX_SPEED, MIN_SPEED
from speechbatch.domain.statuses import ExportStatus, ItemStatus, JobStatus, RunOutcome, values
from speechbatch.services import MAX_ITEMS, MAX_TITLE, Limits
from speechbatch.services.accounts import MAX_TOKEN_NAME
from speechbatch.services.documents import MAX_ITEM_CHARACTERS, MIN_ITEM_CHARACTERS
from speechbatch.web.context import services

bp = Blueprint("openapi", __name__)

JOB_STATUSES = values(JobStatus)
ITEM_STATUSES = values(ItemStatus)
RUN_OUTCOMES = values(RunOutcome)
RUN_KINDS = ["generate", "regenerate", "resume"]
ERROR_TEXT = {
    400: "Malformed request (bad JSON, or a session call without a valid X-CSRFToken).",
    401: "No valid bearer token and no signed-in session.",
    404: "Not found, or not the caller's organization's.",
    405: "Method not allowed on this path.",
    409: "Conflicts with the current state; `code` says which.",
    413: "The request body is over 25 MiB.",
    422: "Invalid input; the message names the field.",
    503: "The file storage did not answer; try again shortly.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object schema; extra properties are allowed (answers may grow, never shrink)."""
    return {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
    }


# Text with at least one character that is not whitespace (in Python's sense as well as
# JSON Schema's: the server trims first) and no NUL, which no database column can hold.
NOT_BLANK = "^[^\\u0000]*[^\\s\\u0000\\u001c-\\u001f\\u0085][^\\u0000]*$"
TIMESTAMP = {"type": "string", "format": "date-time"}
# A key, trimmed: 1 to 100 of A-Z a-z 0-9 . _ - (surrounding whitespace is allowed).
KEY_SCHEMA_PATTERN = "^[ \\t\\n\\r]*[A-Za-z0-9._-]{1,100}[ \\t\\n\\r]*$"
ID = {"type": "integer", "minimum": 1}
PROGRESS = _obj(
    {
        key: {"type": "integer", "minimum": 0}
        for key in ("total", "pending", "generating", "done", "error", "stale", "suspect")
    }
)
# Editing (issue 29): quality verdicts, job options, selections, flags and search.
SUSPECTS = ["silent", "too_short", "too_long"]
NO_NUL = "^[^\\u0000]*$"
OPTIONS = {
    "type": "object",
    "properties": {
        "speed": {"type": "number", "minimum": MIN_SPEED, "maximum": MAX_SPEED},
        "instructions": {"type": "string", "maxLength": MAX_INSTRUCTIONS, "pattern": NO_NUL},
    },
    "additionalProperties": False,
}
FLAG_QUERY = [
    _query(flag, f"`1`: only {flag} items (not with `status`).", {"enum": ["0", "1"]})
    for flag in ("stale", "suspect")
]
SELECTION_QUERY = [
    _query(
        "items",
        "Comma-separated item ids: estimate a regenerate of only those items.",
        {"type": "string", "pattern": "^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17})*$"},
    ),
    _query("stale", "`1`: estimate a regenerate of the stale items.", {"enum": ["0", "1"]}),
]
SEARCH = {"type": "string", "maxLength": 200}
JOB_FIELDS = {
    "id": ID,
    "title": {"type": "string"},
    "voice": {"type": "string"},
    "status": {"enum": JOB_STATUSES},
    "attempt": {"type": "integer", "minimum": 0},
    "error_message": _nullable({"type": "string"}),
    "created_at": TIMESTAMP,
    "updated_at": TIMESTAMP,
    "started_at": _nullable(TIMESTAMP),
    "finished_at": _nullable(TIMESTAMP),
    "chapters": {"type": "array", "items": _ref("Chapter")},
    "options": _ref("Options"),
    "progress": _ref("Progress"),
}
SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": _obj(
                {"code": {"type": "string"}, "message": {"type": "string"}},
            )
        }
    ),
    "Progress": PROGRESS,
    "Chapter": _obj(
        {
            "index": {"type": "integer", "minimum": 0},
            "title": {"type": "string"},
            "first_position": {"type": "integer", "minimum": 1},
            "items": {"type": "integer", "minimum": 0},
        }
    ),
    "Item": _obj(
        {
            "id": ID,
            "position": {"type": "integer", "minimum": 0},
            "key": _nullable({"type": "string"}),
            "chapter": _nullable({"type": "integer", "minimum": 0}),
            "text": {"type": "string"},
            "status": {"enum": ITEM_STATUSES},
            "error_message": _nullable({"type": "string"}),
            "audio_url": _nullable({"type": "string", "pattern": "^/api/"}),
            "reused": {"type": "boolean"},
            "stale": {"type": "boolean"},
            "duration_seconds": _nullable({"type": "number", "minimum": 0}),
            "suspect": _nullable({"enum": SUSPECTS}),
            "updated_at": TIMESTAMP,
        },
    ),
    "Run": _obj(
        {
            "attempt": {"type": "integer", "minimum": 1},
            "kind": {"enum": RUN_KINDS},
            "outcome": {"enum": RUN_OUTCOMES},
            "selected": _nullable({"type": "integer", "minimum": 0}),
            "started_at": TIMESTAMP,
            "finished_at": _nullable(TIMESTAMP),
            "error_message": _nullable({"type": "string"}),
            # Extensions of the contract's run: who started and cancelled it, what it
            # billed (recorded before each call), and the worker (host:pid) that ran it.
            "started_by": _nullable({"type": "string"}),
            "cancelled_by": _nullable({"type": "string"}),
            "billed_characters": {"type": "integer", "minimum": 0},
            "provider_calls": {"type": "integer", "minimum": 0},
            "worker": _nullable({"type": "string"}),
        }
    ),
    # An extension: the live run's lease, and how many items wait for the deployment's
    # provider slots or pace (so a slow job reads as alive and says why).
    "Lease": _obj(
        {
            "worker": _nullable({"type": "string"}),
            "last_progress_at": TIMESTAMP,
            "reclaim_count": {"type": "integer", "minimum": 0},
            "lease_seconds": {"type": "number"},
            "worker_dead_seconds": {"type": "number"},
            "expires_at": _nullable(TIMESTAMP),
            "waiting_for_slot": {"type": "integer", "minimum": 0},
            "waiting_for_pace": {"type": "integer", "minimum": 0},
        }
    ),
    "JobSummary": _obj(JOB_FIELDS),
    # `items` is left out with ?items=none.
    "Job": _obj(
        {**JOB_FIELDS, "runs": {"type": "array", "items": _ref("Run")}, "lease": _ref("Lease")},
        {"items": {"type": "array", "items": _ref("Item")}},
    ),
    "JobList": _obj(
        {
            "jobs": {"type": "array", "items": _ref("JobSummary")},
            "total": {"type": "integer", "minimum": 0},
            "page": {"type": "integer", "minimum": 1},
            "per_page": {"type": "integer", "minimum": 1, "maximum": 200},
        }
    ),
    "ItemPage": _obj(
        {
            "items": {"type": "array", "items": _ref("Item")},
            "total": {"type": "integer", "minimum": 0},
        }
    ),
    "Estimate": _obj(
        {
            "items": {"type": "integer", "minimum": 0},
            "characters": {"type": "integer", "minimum": 0},
            "reused_items": {"type": "integer", "minimum": 0},
            "lexicon_timeouts": {"type": "integer", "minimum": 0},
            "price": _nullable(
                _obj({"amount": {"type": "number"}, "currency": {"type": "string"}})
            ),
        }
    ),
    "Usage": _obj(
        {
            "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
            "billed_characters": {"type": "integer", "minimum": 0},
            "provider_calls": {"type": "integer", "minimum": 0},
            "budget_characters": _nullable({"type": "integer", "minimum": 0}),
            "remaining_characters": _nullable({"type": "integer"}),
        }
    ),
    "Voices": _obj({"voices": {"type": "array", "items": {"type": "string"}}}),
    "Export": _obj(
        {
            "id": ID,
            "status": {"enum": values(ExportStatus)},
            "error_message": _nullable({"type": "string"}),
            "download_url": _nullable({"type": "string", "pattern": "^/api/"}),
            "created_at": TIMESTAMP,
            "finished_at": _nullable(TIMESTAMP),
        }
    ),
    "Token": _obj(
        {
            "id": ID,
            "name": {"type": "string"},
            "prefix": {"type": "string"},
            "created_at": TIMESTAMP,
            "last_used_at": _nullable(TIMESTAMP),
        }
    ),
    "NewToken": _obj(
        {
            "id": ID,
            "name": {"type": "string"},
            "prefix": {"type": "string"},
            "token": {"type": "string"},
            "created_at": TIMESTAMP,
        }
    ),
    "TokenList": _obj({"tokens": {"type": "array", "items": _ref("Token")}}),
    "TokenRequest": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": MAX_TOKEN_NAME, "pattern": NOT_BLANK}
        },
        "required": ["name"],
    },
}


def _new_job(limits: Limits) -> dict[str, Any]:
    """The body of POST /api/jobs: the voices and item length of the configured provider.

    An item is a text or ``{"text", "key"}``; keys must also be unique in the job, which a
    schema cannot say."""
    text = {"type": "string", "maxLength": limits.max_chars, "pattern": NOT_BLANK}
    keyed = {
        "type": "object",
        "properties": {"text": text, "key": {"type": "string", "pattern": KEY_SCHEMA_PATTERN}},
        "required": ["text"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": MAX_TITLE, "pattern": NOT_BLANK},
            "voice": {"enum": list(limits.voices)},
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_ITEMS,
                "items": {"anyOf": [text, keyed]},
            },
            "options": OPTIONS,
        },
        "required": ["title", "voice", "items"],
    }


def _import_job(limits: Limits) -> dict[str, Any]:
    """The multipart body of POST /api/jobs/import. ``file`` is a .txt, .md or .epub upload
    (its file name says which; without one, a ZIP is read as EPUB and anything else as
    text); described here as the text form that any client can send."""
    return {
        "type": "object",
        "properties": {
            "file": {"type": "string", "pattern": NOT_BLANK},
            "voice": {"enum": list(limits.voices)},
            "title": {"type": "string", "maxLength": MAX_TITLE, "pattern": NOT_BLANK},
            "max_characters": {
                "type": "integer",
                "minimum": MIN_ITEM_CHARACTERS,
                "maximum": min(MAX_ITEM_CHARACTERS, limits.max_chars),
            },
        },
        "required": ["file", "voice"],
    }


ETAG_HEADERS = {"ETag": {"description": "Version of this answer.", "schema": {"type": "string"}}}
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "An ETag from an earlier answer: 304 when nothing changed.",
    "schema": {"type": "string"},
}


def _json(
    schema_name: str,
    description: str,
    headers: dict[str, Any] | None = None,
    links: dict[str, str] | None = None,
) -> Any:
    """A JSON answer; ``links`` maps an operationId to the path parameter the body's id fills."""
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }
    if headers:
        answer["headers"] = headers
    if links:
        answer["links"] = {
            operation: {"operationId": operation, "parameters": {parameter: "$response.body#/id"}}
            for operation, parameter in links.items()
        }
    return answer


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/E{status}"} for status in statuses}


def _path_id(name: str, what: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"The {what}'s id.",
        "schema": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    }


JOB_ID = _path_id("job_id", "job")
JOB_LINKS = {
    name: "job_id"
    for name in ("getJob", "generateJob", "regenerateJob", "cancelJob", "estimateJob", "listItems")
}
NOT_MODIFIED = {"304": {"description": "Not modified: the If-None-Match ETag is current."}}
# A stored file's other answers: a range of it, and (SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS)
# a redirect to a presigned URL of the bucket.
STORED_FILE = {
    **NOT_MODIFIED,
    "206": {"description": "The requested byte range (a Range header)."},
    "302": {"description": "The file's presigned URL in the bucket (Location)."},
}


def _operation(
    operation_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: str | None = None,
    public: bool = False,
) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if parameters:
        op["parameters"] = parameters
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    op["responses"] = responses
    if public:
        op["security"] = []
    return op


def _start(operation_id: str, summary: str, conflicts: str) -> dict[str, Any]:
    return {
        "parameters": [JOB_ID],
        "post": _operation(
            operation_id,
            summary,
            {
                "202": _json("Job", "The claimed job, GENERATING with a new attempt."),
                **_errors(400, 401, 404, 409),
            },
        )
        | {"description": conflicts},
    }


def _with_body(path: dict[str, Any], schema_name: str, statuses: tuple[int, ...]) -> dict[str, Any]:
    """``path``'s POST with an optional JSON body and more error statuses."""
    post = dict(path["post"])
    post["requestBody"] = {
        "required": False,
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }
    post["responses"] = {**post["responses"], **_errors(*statuses)}
    return {**path, "post": post}


PATHS: dict[str, Any] = {
    "/api/openapi.json": {
        "get": _operation(
            "getOpenApi",
            "This document.",
            {
                "200": {
                    "description": "The OpenAPI document.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
            public=True,
        )
    },
    "/api/voices": {
        "get": _operation(
            "listVoices",
            "The configured provider's voices.",
            {"200": _json("Voices", "The voices."), **_errors(401)},
        )
    },
    "/api/jobs": {
        "get": _operation(
            "listJobs",
            "The organization's jobs, newest first, after recovery of dead runs.",
            {
                "200": _json("JobList", "One page of job summaries.", ETAG_HEADERS),
                **NOT_MODIFIED,
                **_errors(401, 422),
            },
            parameters=[
                _query("status", "Only jobs in this state.", {"enum": JOB_STATUSES}),
                _query("q", "Only jobs whose title contains this (case-blind).", SEARCH),
                _query("page", "Page number, from 1.", {"type": "integer", "minimum": 1}),
                _query(
                    "per_page",
                    "Jobs per page (default 50).",
                    {"type": "integer", "minimum": 1, "maximum": 200},
                ),
                IF_NONE_MATCH,
            ],
        ),
        "post": _operation(
            "createJob",
            "Create a PENDING job. Titles and items are trimmed first.",
            {
                "201": _json("Job", "The new job.", links=JOB_LINKS),
                **_errors(400, 401, 413, 422),
            },
            body="NewJob",
        ),
    },
    "/api/jobs/import": {
        "post": {
            **_operation(
                "importJob",
                "Create a PENDING job from a document (.txt, .md, .epub): chapters from its "
                "headings or table of contents, prose packed into items of at most "
                "max_characters (default 1500), nothing dropped.",
                {
                    "201": _json("Job", "The new job, with its chapters.", links=JOB_LINKS),
                    **_errors(400, 401, 413, 422),
                },
            ),
            "requestBody": {
                "required": True,
                "content": {"multipart/form-data": {"schema": _ref("ImportJob")}},
            },
        },
    },
    "/api/jobs/{job_id}": {
        "parameters": [JOB_ID],
        "get": _operation(
            "getJob",
            "One job, after lease-expiry recovery.",
            {
                "200": _json("Job", "The job.", ETAG_HEADERS),
                **NOT_MODIFIED,
                **_errors(401, 404, 422),
            },
            parameters=[
                _query(
                    "items",
                    "`none` leaves `items` out; `all` (the default) keeps them.",
                    {"enum": ["all", "none"]},
                ),
                IF_NONE_MATCH,
            ],
        ),
    },
    "/api/jobs/{job_id}/generate": _start(
        "generateJob",
        "Claim the job and send every item that is not DONE.",
        "409 `already_generating`, `nothing_to_generate` (every item DONE) or `budget_exceeded`.",
    ),
    "/api/jobs/{job_id}/regenerate": _with_body(
        _start(
            "regenerateJob",
            "Claim the job and send every item again (each is billed again), or only the"
            " items of an optional selection.",
            "409 `already_generating`, `budget_exceeded`, or `nothing_to_generate` (no item"
            " is stale); 422 when `items` names an item that is not the job's.",
        ),
        "Selection",
        (422,),
    ),
    "/api/jobs/{job_id}/cancel": {
        "parameters": [JOB_ID],
        "post": _operation(
            "cancelJob",
            "End the live run at once: the job becomes FAILED, its run CANCELLED.",
            {"200": _json("Job", "The job."), **_errors(400, 401, 404, 409)},
        ),
    },
    "/api/jobs/{job_id}/estimate": {
        "parameters": [JOB_ID],
        "get": _operation(
            "estimateJob",
            "What Generate (or Regenerate) would send and bill now.",
            {"200": _json("Estimate", "The estimate."), **_errors(401, 404, 422)},
            parameters=[
                _query(
                    "regenerate",
                    "`1` (or `true`, `yes`) estimates Regenerate; absent or any other value,"
                    " Generate.",
                    {"type": "string"},
                ),
                *SELECTION_QUERY,
            ],
        ),
    },
    "/api/jobs/{job_id}/items": {
        "parameters": [JOB_ID],
        "get": _operation(
            "listItems",
            "A job's items in position order.",
            {
                "200": _json("ItemPage", "One slice of the items.", ETAG_HEADERS),
                **NOT_MODIFIED,
                **_errors(401, 404, 422),
            },
            parameters=[
                _query("status", "Only items in this state.", {"enum": ITEM_STATUSES}),
                *FLAG_QUERY,
                _query("offset", "Items to skip.", {"type": "integer", "minimum": 0}),
                _query(
                    "limit",
                    "Items to return (default 100).",
                    {"type": "integer", "minimum": 1, "maximum": 1000},
                ),
                IF_NONE_MATCH,
            ],
        ),
    },
    "/api/jobs/{job_id}/items/{item_id}/audio": {
        "parameters": [JOB_ID, _path_id("item_id", "item")],
        "get": _operation(
            "getItemAudio",
            "An item's audio.",
            {
                "200": {
                    "description": "The audio bytes.",
                    "content": {"audio/mpeg": {"schema": {"type": "string", "format": "binary"}}},
                },
                **STORED_FILE,
                **_errors(401, 404, 503),
            },
        ),
    },
    "/api/usage": {
        "get": _operation(
            "getUsage",
            "The organization's billed characters this month (UTC) against its budget.",
            {"200": _json("Usage", "This month's usage."), **_errors(401)},
        )
    },
    "/api/exports": {
        "post": _operation(
            "createExport",
            "Start a ZIP of the organization's finished audio.",
            {
                "202": _json(
                    "Export",
                    "The RUNNING export.",
                    links={"getExport": "export_id", "downloadExport": "export_id"},
                ),
                **_errors(400, 401, 409),
            },
        )
    },
    "/api/exports/{export_id}": {
        "parameters": [_path_id("export_id", "export")],
        "get": _operation(
            "getExport",
            "One export, after lease-expiry recovery.",
            {"200": _json("Export", "The export."), **_errors(401, 404)},
        ),
    },
    "/api/exports/{export_id}/download": {
        "parameters": [_path_id("export_id", "export")],
        "get": _operation(
            "downloadExport",
            "A COMPLETED export's ZIP: every DONE item's audio and a manifest.csv.",
            {
                "200": {
                    "description": "The archive.",
                    "content": {
                        "application/zip": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
                **STORED_FILE,
                **_errors(401, 404, 503),
            },
        ),
    },
    "/api/tokens": {
        "get": _operation(
            "listTokens",
            "The caller's live API tokens, never their secrets.",
            {"200": _json("TokenList", "The tokens, newest first."), **_errors(401)},
        ),
        "post": _operation(
            "createToken",
            "Create a named API token; its secret is in this answer only.",
            {
                "201": _json(
                    "NewToken", "The token, shown this once.", links={"revokeToken": "token_id"}
                ),
                **_errors(400, 401, 413, 422),
            },
            body="TokenRequest",
        ),
    },
    "/api/tokens/{token_id}": {
        "parameters": [_path_id("token_id", "token")],
        "delete": _operation(
            "revokeToken",
            "Revoke one of the caller's tokens: it stops working at once.",
            {"204": {"description": "Revoked."}, **_errors(400, 401, 404)},
        ),
    },
}


ITEM_ID = _path_id("item_id", "item")
TAKE = {**_path_id("take", "take"), "description": "The take's number (from 1)."}
AUDIO = {
    "description": "The audio bytes.",
    "content": {"audio/mpeg": {"schema": {"type": "string", "format": "binary"}}},
}
EDIT_SCHEMAS: dict[str, Any] = {
    "Options": OPTIONS,
    # Either the items to send or every stale one, never both.
    "Selection": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_ITEMS,
                "items": {**ID, "maximum": 2**63 - 1},
            },
            "stale": {"type": "boolean"},
        },
        "not": {"required": ["items", "stale"]},
    },
    "JobChange": {
        "type": "object",
        "properties": {"voice": {"type": "string"}, "options": OPTIONS},
        "minProperties": 1,
        "additionalProperties": False,
    },
    "Take": _obj(
        {
            "take": {"type": "integer", "minimum": 1},
            "text": {"type": "string"},
            "spoken_text": {"type": "string"},
            "voice": {"type": "string"},
            "audio_url": {"type": "string", "pattern": "^/api/"},
            "duration_seconds": _nullable({"type": "number", "minimum": 0}),
            "reused": {"type": "boolean"},
            "created_at": TIMESTAMP,
            "current": {"type": "boolean"},
        }
    ),
    "TakeList": _obj({"takes": {"type": "array", "items": _ref("Take")}}),
}


def edit_paths(limits: Limits) -> dict[str, Any]:
    """Editing: a line's text, its takes, the job's voice and options, deleting the job."""
    text = {"type": "string", "maxLength": limits.max_chars, "pattern": NOT_BLANK}
    item_edit = {"type": "object", "properties": {"text": text}, "required": ["text"]}
    change = {**EDIT_SCHEMAS["JobChange"]}
    change["properties"] = {**change["properties"], "voice": {"enum": list(limits.voices)}}
    return {
        "/api/jobs/{job_id}": {
            **PATHS["/api/jobs/{job_id}"],
            "patch": _operation(
                "changeJob",
                "Change the job's voice and/or options; its items with audio become stale.",
                {"200": _json("Job", "The job."), **_errors(400, 401, 404, 405, 409, 422)},
            )
            | {"requestBody": _body(change)},
            "delete": _operation(
                "deleteJob",
                "Delete a job that is not GENERATING, with its items, runs and takes.",
                {"204": {"description": "Deleted."}, **_errors(400, 401, 404, 405, 409)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}": {
            "parameters": [JOB_ID, ITEM_ID],
            "patch": _operation(
                "editItem",
                "Give an item a new text: PENDING, its current audio kept and stale.",
                {"200": _json("Job", "The job."), **_errors(400, 401, 404, 405, 409, 422)},
            )
            | {"requestBody": _body(item_edit)},
        },
        "/api/jobs/{job_id}/items/{item_id}/takes": {
            "parameters": [JOB_ID, ITEM_ID],
            "get": _operation(
                "listTakes",
                "The item's kept takes, newest first.",
                {"200": _json("TakeList", "The takes."), **_errors(401, 404)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/takes/{take}/restore": {
            "parameters": [JOB_ID, ITEM_ID, TAKE],
            "post": _operation(
                "restoreTake",
                "Make a kept take the item's audio (and text) again, without a provider call.",
                {"200": _json("Job", "The job."), **_errors(400, 401, 404, 409)},
            ),
        },
        "/api/jobs/{job_id}/items/{item_id}/takes/{take}/audio": {
            "parameters": [JOB_ID, ITEM_ID, TAKE],
            "get": _operation(
                "getTakeAudio", "A kept take's audio.", {"200": AUDIO, **_errors(401, 404)}
            ),
        },
    }


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def document(limits: Limits) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every ``/api/`` call, for the configured provider."""
    from speechbatch.web import openapi_renders  # it builds on this module's helpers
    from speechbatch.web.openapi_lexicon import LEXICON_SCHEMAS, lexicon_paths
    from speechbatch.web.openapi_webhooks import WEBHOOK_SCHEMAS, webhook_paths

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "speechbatch",
            "version": "1",
            "description": (
                "Turn batches of text into speech. Authenticate with `Authorization: Bearer "
                "TOKEN`, or with the browser session plus an `X-CSRFToken` header on writes. "
                'Errors are `{"error": {"code", "message"}}`.'
            ),
        },
        "paths": {
            **PATHS,
            **edit_paths(limits),
            **openapi_renders.PATHS,
            **webhook_paths(),
            **lexicon_paths(),
        },
        "components": {
            "schemas": {
                **SCHEMAS,
                **EDIT_SCHEMAS,
                **openapi_renders.SCHEMAS,
                **WEBHOOK_SCHEMAS,
                **LEXICON_SCHEMAS,
                "NewJob": _new_job(limits),
                "ImportJob": _import_job(limits),
            },
            "responses": {
                f"E{status}": _json("Error", text) for status, text in ERROR_TEXT.items()
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "session"},
            },
        },
        "security": [{"bearer": []}, {"session": []}],
    }


@bp.get("/api/openapi.json")
def openapi_json() -> Response:
    """The OpenAPI document (no authentication)."""
    return jsonify(document(services().limits))
