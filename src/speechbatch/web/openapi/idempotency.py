"""The ``Idempotency-Key`` header in the OpenAPI document: one reusable parameter, the
header that marks a replayed answer, and both added to the four creating calls. Applied
to the finished document, so it does not depend on how the rest is built."""

from __future__ import annotations

import copy
from typing import Any

from speechbatch.services.idempotency import MAX_KEY_LENGTH

CREATING_CALLS = (
    ("/api/jobs", "post"),
    ("/api/jobs/import", "post"),
    ("/api/jobs/{job_id}/renders", "post"),
    ("/api/exports", "post"),
)

PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes a retry safe: the organization's first request with this key runs; a repeat "
        "within 24 hours answers the first answer (with `Idempotent-Replayed: true`) and "
        "creates nothing more, and one that arrives while the first still runs waits for "
        "it (409 `idempotency_key_in_progress` after 20 s). The same key with another "
        "method, path or body answers 422 `idempotency_key_reused`. A call that failed "
        "gives its key back. Bare or as a quoted string."
    ),
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_KEY_LENGTH,
        "pattern": "^[!-~]([ -~]*[!-~])?$",
    },
}

REPLAYED = {
    "description": "`true` on an answer repeated from the first request with the same key.",
    "schema": {"type": "string", "enum": ["true"]},
}


def with_idempotency_keys(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with the header described once under ``components`` and referred to
    by each creating call and its success answer (a copy: the document's parts are
    shared between requests)."""
    document = copy.deepcopy(document)
    components = document.setdefault("components", {})
    components.setdefault("parameters", {})["IdempotencyKey"] = PARAMETER
    components.setdefault("headers", {})["Idempotent-Replayed"] = REPLAYED
    for path, method in CREATING_CALLS:
        operation = document["paths"][path][method]
        parameters = operation.setdefault("parameters", [])
        parameters.append({"$ref": "#/components/parameters/IdempotencyKey"})
        # What a key itself can answer: in progress (409), sent with another request (422).
        for status in ("409", "422"):
            operation["responses"].setdefault(status, {"$ref": f"#/components/responses/E{status}"})
        for status, answer in operation["responses"].items():
            if status.startswith("2") and "$ref" not in answer:
                answer.setdefault("headers", {})["Idempotent-Replayed"] = {
                    "$ref": "#/components/headers/Idempotent-Replayed"
                }
    return document
