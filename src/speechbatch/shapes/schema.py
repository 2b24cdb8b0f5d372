"""JSON Schema from the shapes' types: the OpenAPI document's schemas are made here.

A shape is a ``TypedDict`` (a JSON object: its fields in order, ``NotRequired`` for the
optional ones), a ``StrEnum`` (a set of names) or a type alias built from ``str``,
``int``, ``float``, ``bool``, ``list``, ``dict``, ``X | None`` and ``Literal``.
``Annotated[T, Schema(minimum=0)]`` adds JSON Schema keywords to ``T``;
``Annotated[T, Configured("voice")]`` marks keywords that the running deployment gives
(its voices, its item length) when the document is made. Every ``TypedDict`` and
``StrEnum`` becomes one named component that the others refer to by ``$ref``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

REF = "#/components/schemas/"
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    type(None): {"type": "null"},
    Any: {},
}


class Schema:
    """JSON Schema keywords that apply to the annotated type."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords


class Configured:
    """Keywords the running deployment gives, by name (see ``Converter``)."""

    def __init__(self, name: str) -> None:
        self.name = name


_OBJECT_KEYWORDS: dict[type, dict[str, Any]] = {}


def object_keywords(**keywords: Any) -> Any:
    """A class decorator: more keywords for a ``TypedDict``'s object schema
    (``additionalProperties``, ``minProperties``, ``not``...)."""

    def mark(shape: type) -> type:
        _OBJECT_KEYWORDS[shape] = keywords
        return shape

    return mark


def _required(shape: type, hint: Any) -> bool:
    """Whether a field must be present: ``Required``, or not ``NotRequired`` in a total
    ``TypedDict`` (read from the hint: ``__required_keys__`` cannot see through the
    postponed annotations of ``from __future__ import annotations``)."""
    origin = get_origin(hint)
    if origin is Annotated:
        origin = get_origin(get_args(hint)[0])
    if origin is Required:
        return True
    return origin is not NotRequired and bool(getattr(shape, "__total__", True))


def fields(shape: type) -> list[str]:
    """A ``TypedDict``'s property names, in order."""
    return list(get_type_hints(shape))


def in_order(
    shape: type, values: Mapping[str, str], elsewhere: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """``values`` (one per field of ``shape``, but those filled ``elsewhere``) as pairs in
    the shape's order: how code that spells an answer in another language (SQL) follows
    the shape. A field missing or extra is a TypeError when that code is built."""
    left_out = set(elsewhere)
    names = [name for name in fields(shape) if name not in left_out]
    if set(names) != set(values):
        missing, extra = set(names) - set(values), set(values) - set(names)
        raise TypeError(f"{shape.__name__}: missing {sorted(missing)}, extra {sorted(extra)}")
    return [(name, values[name]) for name in names]


class Converter:
    """Turns shapes into JSON Schemas; collects every named shape they refer to.

    ``configured`` maps a ``Configured`` name to the keywords it stands for now."""

    def __init__(self, configured: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.configured = configured or {}
        self.named: dict[str, type] = {}

    def schema(self, tp: Any) -> dict[str, Any]:
        """The JSON Schema of one type (a named shape is a ``$ref``)."""
        origin = get_origin(tp)
        if origin is Annotated:
            base, *extras = get_args(tp)
            return self._annotated(self.schema(base), extras)
        if origin in (NotRequired, Required):
            return self.schema(get_args(tp)[0])
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.schema(arg) for arg in get_args(tp)]}
        if origin is Literal:
            return {"type": "string", "enum": list(get_args(tp))}
        if origin is list:
            return {"type": "array", "items": self.schema(get_args(tp)[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.schema(get_args(tp)[1])}
        if is_typeddict(tp) or (isinstance(tp, type) and issubclass(tp, StrEnum)):
            return self._ref(tp)
        if tp in _SCALARS:
            return dict(_SCALARS[tp])
        raise TypeError(f"no JSON Schema for {tp!r}")

    def _annotated(self, schema: dict[str, Any], extras: Iterable[Any]) -> dict[str, Any]:
        for extra in extras:
            if isinstance(extra, Schema):
                schema = {**schema, **extra.keywords}
            elif isinstance(extra, Configured):
                schema = {**schema, **self.configured.get(extra.name, {})}
        return schema

    def _ref(self, shape: type) -> dict[str, Any]:
        known = self.named.setdefault(shape.__name__, shape)
        if known is not shape:
            raise TypeError(f"two shapes are named {shape.__name__}")
        return {"$ref": REF + shape.__name__}

    def definition(self, shape: type) -> dict[str, Any]:
        """The component schema of a named shape (an object or an enum)."""
        described = {"description": " ".join(shape.__doc__.split())} if shape.__doc__ else {}
        if isinstance(shape, type) and issubclass(shape, StrEnum):
            return {"type": "string", "enum": [str(m) for m in shape], **described}
        hints = get_type_hints(shape, include_extras=True)
        return {
            "type": "object",
            "properties": {name: self.schema(hint) for name, hint in hints.items()},
            "required": [name for name, hint in hints.items() if _required(shape, hint)],
            **_OBJECT_KEYWORDS.get(shape, {}),
            **described,
        }

    def components(self, shapes: Iterable[type]) -> dict[str, Any]:
        """The component schemas of ``shapes`` and of every shape they refer to."""
        for shape in shapes:
            self._ref(shape)
        done: dict[str, Any] = {}
        while len(done) < len(self.named):
            for name, shape in list(self.named.items()):
                if name not in done:
                    done[name] = self.definition(shape)
        return dict(sorted(done.items()))
