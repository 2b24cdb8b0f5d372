"""SQL text that builds JSON in the database, spelled for each dialect (``pg``:
PostgreSQL, else SQLite): objects, arrays, timestamps and booleans as the API writes them."""

from __future__ import annotations


def ts(pg: bool, column: str) -> str:
    """An ISO 8601 UTC timestamp with offset and six digits of microseconds, as
    ``isoformat(timespec="microseconds")`` writes it."""
    if pg:
        # to_char(… AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'), defined
        # once by migration 0008 (STABLE: the planner inlines it).
        return f"sb_isotime({column})"
    # SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC).
    return f"(replace({column}, ' ', 'T') || '+00:00')"


def obj(pg: bool, pairs: list[tuple[str, str]]) -> str:
    """A JSON object of (key, SQL value) pairs, in that order."""
    args = ", ".join(f"'{key}', {value}" for key, value in pairs)
    return f"json_build_object({args})" if pg else f"json_object({args})"


def array(pg: bool, document: str, source: str, order: str) -> str:
    """A JSON array of ``document`` over the rows of ``source`` (a FROM ... clause)."""
    if pg:
        return (
            f"(SELECT coalesce(json_agg(x.doc ORDER BY x.k), '[]'::json) FROM "
            f"(SELECT {document} AS doc, {order} AS k {source}) x)"
        )
    # SQLite aggregates in the subquery's order; json() keeps each element an object.
    return f"(SELECT json_group_array(json(x.doc)) FROM (SELECT {document} AS doc {source}) x)"


def as_text(pg: bool, document: str) -> str:
    """The document as text (the driver would parse PostgreSQL's json into objects)."""
    return f"({document})::text" if pg else document


def embed(pg: bool, array: str) -> str:
    """An array subquery as a JSON value inside an object."""
    return array if pg else f"json({array})"


def json_bool(pg: bool, column: str) -> str:
    """A boolean column as a JSON true/false (SQLite stores 0/1)."""
    return column if pg else f"json(CASE WHEN {column} THEN 'true' ELSE 'false' END)"


def mapping(pg: bool, key: str, value: str, source: str, order: str) -> str:
    """A JSON object of ``key``: ``value`` over the rows of ``source`` (a FROM ...
    clause), keys in ``order``; ``{}`` when there are none. Embedded as a value."""
    if pg:
        return (
            f"(SELECT coalesce(json_object_agg({key}, {value} ORDER BY {order}), '{{}}'::json)"
            f" {source})"
        )
    # SQLite aggregates in the subquery's order.
    rows = f"SELECT {key} AS k, {value} AS v {source} ORDER BY {order}"
    return f"json((SELECT json_group_object(x.k, x.v) FROM ({rows}) x))"
