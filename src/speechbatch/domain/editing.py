"""Pure rules of editing a job: job options and selections (the spoken text is the
lexicon's: ``Lexicon.spoken``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

MIN_SPEED = 0.25
MAX_SPEED = 4.0
MAX_INSTRUCTIONS = 2000


class OptionsError(ValueError):
    """Job options that are not valid; the message says which and why."""


def clean_options(raw: Any) -> dict[str, Any]:
    """Job options (an object) checked and normalized: ``speed`` 0.25-4.0,
    ``instructions`` up to 2,000 characters (blank means none); {} is no options."""
    if not isinstance(raw, Mapping):
        raise OptionsError("options must be an object")
    unknown = sorted(set(raw) - {"speed", "instructions"})
    if unknown:
        raise OptionsError(f"unknown option {unknown[0]!r}: speed and instructions are allowed")
    options: dict[str, Any] = {}
    speed = raw.get("speed")
    if "speed" in raw:
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not math.isfinite(speed)
        ):
            raise OptionsError("options.speed must be a number")
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise OptionsError(f"options.speed must be between {MIN_SPEED} and {MAX_SPEED}")
        if float(speed) != 1.0:
            options["speed"] = float(speed)
    instructions = raw.get("instructions")
    if "instructions" in raw:
        if not isinstance(instructions, str):
            raise OptionsError("options.instructions must be a text")
        instructions = instructions.strip()
        if len(instructions) > MAX_INSTRUCTIONS:
            raise OptionsError(f"options.instructions is longer than {MAX_INSTRUCTIONS} characters")
        if "\x00" in instructions:
            raise OptionsError("options.instructions contains a NUL")
        if instructions:
            options["instructions"] = instructions
    return options


def options_json(options: Mapping[str, Any]) -> str:
    """Options as the stored JSON text: sorted keys, so equal options are equal texts."""
    return json.dumps(dict(options), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def parse_options(stored: str | None) -> dict[str, Any]:
    """Stored options JSON back to a dict ({} for none)."""
    if not stored:
        return {}
    value = json.loads(stored)
    return value if isinstance(value, dict) else {}


def speed_of(options: Mapping[str, Any]) -> float:
    """The speaking rate the options ask for (1.0 by default)."""
    speed = options.get("speed")
    return float(speed) if isinstance(speed, int | float) else 1.0


class Selection:
    """Which items a regenerate sends: the ids given, or (``items`` None) every stale one."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[int, ...] | None = None) -> None:
        self.items = items

    @property
    def stale(self) -> bool:
        """Whether this selection is every stale item."""
        return self.items is None

    def __repr__(self) -> str:
        return "Selection(stale)" if self.items is None else f"Selection({list(self.items)})"
