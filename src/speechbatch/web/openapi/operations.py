"""The parts an operation of the document is made of: answers, errors, parameters.

A schema anywhere in these dictionaries may be a type (a shape of ``speechbatch.shapes``
or an annotated scalar): ``document`` turns every type into its JSON Schema, and every
named shape into a component that the others refer to.
"""

from __future__ import annotations

from typing import Annotated, Any

from speechbatch.shapes.schema import Schema

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
PathId = Annotated[int, Schema(minimum=1, maximum=2**63 - 1)]
BYTES = "application/octet-stream"
ETAG_HEADERS = {"ETag": {"description": "Version of this answer.", "schema": str}}
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "An ETag from an earlier answer: 304 when nothing changed.",
    "schema": str,
}
NOT_MODIFIED = {"304": {"description": "Not modified: the If-None-Match ETag is current."}}
# A stored file's other answers: a range of it, and (SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS)
# a redirect to a presigned URL of the bucket.
STORED_FILE = {
    **NOT_MODIFIED,
    "206": {"description": "The requested byte range (a Range header)."},
    "302": {"description": "The file's presigned URL in the bucket (Location)."},
}
NO_CONTENT = {"204": {"description": "Done; no body."}}


def answer(
    shape: Any,
    description: str,
    headers: dict[str, Any] | None = None,
    links: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JSON answer of ``shape``; ``links`` maps an operationId to the path parameter that
    the answer's ``id`` fills."""
    made: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": shape}},
    }
    if headers:
        made["headers"] = headers
    if links:
        made["links"] = {
            operation: {"operationId": operation, "parameters": {parameter: "$response.body#/id"}}
            for operation, parameter in links.items()
        }
    return made


def download(description: str, *content_types: str) -> dict[str, Any]:
    """A download's 200: its own types, then generic bytes (``web.downloads.negotiated``),
    the one binary type that generated clients turn into bytes. A text type is a string:
    a client reads it as text."""
    binary = {"type": "string", "format": "binary"}
    content = {
        kind: {"schema": {"type": "string"} if kind.startswith("text/") else binary}
        for kind in (*content_types, BYTES)
    }
    return {"description": description, "content": content}


def file_path(
    parameters: list[dict[str, Any]],
    operation_id: str,
    summary: str,
    ok: dict[str, Any],
) -> dict[str, Any]:
    """The path of a stored file's download (``ok``, a ``download``): its ranges,
    redirect and conditional answers too."""
    answers = {"200": ok, **STORED_FILE, **errors(401, 404, 503)}
    return {"parameters": parameters, "get": operation(operation_id, summary, answers)}


def errors(*statuses: int) -> dict[str, Any]:
    """The error answers of these statuses (``{"error": {"code", "message"}}``)."""
    return {str(status): {"$ref": f"#/components/responses/E{status}"} for status in statuses}


def path_id(name: str, what: str) -> dict[str, Any]:
    """A path parameter that is an id."""
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"The {what}'s id.",
        "schema": PathId,
    }


def query(name: str, description: str, schema: Any) -> dict[str, Any]:
    """An optional query parameter."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def operation(
    operation_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: Any = None,
    body_required: bool = True,
    multipart: bool = False,
    public: bool = False,
) -> dict[str, Any]:
    """One operation; ``body`` is the shape of its JSON (or ``multipart``) body."""
    made: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if parameters:
        made["parameters"] = parameters
    if body is not None:
        kind = "multipart/form-data" if multipart else "application/json"
        made["requestBody"] = {"required": body_required, "content": {kind: {"schema": body}}}
    made["responses"] = responses
    if public:
        made["security"] = []
    return made
