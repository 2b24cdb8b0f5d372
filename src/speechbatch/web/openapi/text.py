"""The rule of ``web/text_fields.py`` in the OpenAPI document: no string a request sends
(a body's values and keys at any depth, a parameter) holds a NUL. Applied to the
finished document, so every schema a request uses says it, present and future: a string
without a pattern gets one, and an object's undeclared properties are text too."""

from __future__ import annotations

import copy
from typing import Any

NO_NUL = "^[^\\u0000]*$"
JSON_TEXT = "JsonText"
_JSON_TEXT_REF = {"$ref": f"#/components/schemas/{JSON_TEXT}"}
# Any JSON value whose strings hold no NUL (a request's undeclared properties), written
# without a type: each keyword judges only the values it applies to (``pattern`` strings,
# ``items`` arrays, the rest objects). A union that refers to itself says the same, but
# openapi-python-client cannot read one.
JSON_TEXT_SCHEMA: dict[str, Any] = {
    "pattern": NO_NUL,
    "items": _JSON_TEXT_REF,
    "propertyNames": {"pattern": NO_NUL},
    "additionalProperties": _JSON_TEXT_REF,
}


def _textual(schema: Any, schemas: dict[str, Any], seen: set[str]) -> None:
    """Make ``schema`` (and what it refers to) say that its strings hold no NUL."""
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        if name not in seen:
            seen.add(name)
            _textual(schemas[name], schemas, seen)
        return
    free = not {"pattern", "enum"} & set(schema) and schema.get("format") != "binary"
    if schema.get("type") == "string" and free:
        schema["pattern"] = NO_NUL
    if schema.get("type") == "object":
        schema.setdefault("propertyNames", {"pattern": NO_NUL})
        schema.setdefault("additionalProperties", _JSON_TEXT_REF)
    for key in ("properties", "patternProperties"):
        for child in schema.get(key, {}).values():
            _textual(child, schemas, seen)
    for key in ("items", "additionalProperties", "not"):
        _textual(schema.get(key), schemas, seen)
    for key in ("anyOf", "oneOf", "allOf"):
        for child in schema.get(key, []):
            _textual(child, schemas, seen)


def textual_requests(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` in which every request's strings say they hold no NUL."""
    document = copy.deepcopy(document)  # it shares the module's constant parts
    schemas: dict[str, Any] = document["components"]["schemas"]
    schemas[JSON_TEXT] = copy.deepcopy(JSON_TEXT_SCHEMA)
    seen = {JSON_TEXT}  # text already
    for path in document["paths"].values():
        for operation in path.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                _textual(parameter.get("schema"), schemas, seen)
            for content in operation.get("requestBody", {}).get("content", {}).values():
                _textual(content.get("schema"), schemas, seen)
    return document
