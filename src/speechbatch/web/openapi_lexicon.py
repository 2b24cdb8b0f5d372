"""The lexicon's part of the OpenAPI document (schemas and paths), with openapi.py's
helpers; openapi.py's ``document`` imports it when it builds the document."""

from __future__ import annotations

from typing import Any

from speechbatch.domain.lexicon import MAX_MATCH, MAX_RULES, MAX_SAY
from speechbatch.services.lexicon import MAX_PREVIEW
from speechbatch.web.openapi import NOT_BLANK, _errors, _json, _obj, _operation, _ref

NO_NUL = "^[^\\u0000]*$"

RULE = {
    "type": "object",
    "properties": {
        "match": {"type": "string", "minLength": 1, "maxLength": MAX_MATCH, "pattern": NOT_BLANK},
        "say": {"type": "string", "maxLength": MAX_SAY, "pattern": NO_NUL},
        "regex": {"type": "boolean"},
        "case_sensitive": {"type": "boolean"},
    },
    "required": ["match"],
    "additionalProperties": False,
}
RULES = {"type": "array", "maxItems": MAX_RULES, "items": _ref("LexiconRule")}

LEXICON_SCHEMAS: dict[str, Any] = {
    "LexiconRule": RULE,
    "Lexicon": _obj(
        {
            "rules": RULES,
            "version": {"type": "integer", "minimum": 0},
            "stale_pass": {"enum": ["running", "done"]},
        }
    ),
    "LexiconRules": {
        "type": "object",
        "properties": {"rules": RULES},
        "required": ["rules"],
    },
    "PreviewRequest": {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": MAX_PREVIEW}},
        "required": ["text"],
    },
    "SpokenText": _obj({"spoken_text": {"type": "string"}}),
    "LexiconImpact": _obj(
        {"lines": {"type": "integer", "minimum": 0}, "jobs": {"type": "integer", "minimum": 0}}
    ),
}


def lexicon_paths() -> dict[str, dict[str, Any]]:
    """The lexicon calls."""
    return {
        "/api/lexicon": {
            "get": _operation(
                "getLexicon",
                "The organization's pronunciation rules, their version, and whether the "
                "stale marks of the newest version are still being written.",
                {"200": _json("Lexicon", "The rules."), **_errors(401)},
            ),
            "put": _operation(
                "putLexicon",
                "Replace the rules (a regex that does not compile or may run away: 422 "
                "invalid_rule, nothing changed); the version increments and the DONE lines "
                "the change affects are marked stale in the background (stale_pass).",
                {"200": _json("Lexicon", "The new rules."), **_errors(400, 401, 413, 422)},
                body="LexiconRules",
            ),
        },
        "/api/lexicon/preview": {
            "post": _operation(
                "previewLexicon",
                "A text as the organization's rules would have it spoken.",
                {"200": _json("SpokenText", "The spoken text."), **_errors(400, 401, 413, 422)},
                body="PreviewRequest",
            ),
        },
        "/api/lexicon/impact": {
            "post": _operation(
                "lexiconImpact",
                "How many DONE lines in how many jobs these rules would make stale (a dry "
                "run: nothing is saved).",
                {
                    "200": _json("LexiconImpact", "The lines and jobs."),
                    **_errors(400, 401, 413, 422),
                },
                body="LexiconRules",
            ),
        },
    }
