"""What any text the service takes must be: storable (no NUL, no lone surrogate, which no
database or provider accepts as text) and, for a title, visible."""

from __future__ import annotations

import functools
import unicodedata

# Characters that show nothing by themselves: controls, format characters (zero-width
# spaces and joiners, direction marks), separators and spaces, and combining marks.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be taken as text, in words; None when it can."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (half of a UTF-16 pair), which is not text"
    return None


def visible(char: str) -> bool:
    """Whether a character shows by itself."""
    return not char.isspace() and unicodedata.category(char) not in _INVISIBLE


def has_visible(value: str) -> bool:
    """Whether ``value`` has a character that shows (not only spaces, zero-width or
    control characters, or combining marks)."""
    return any(visible(char) for char in value)


@functools.cache
def invisible_class() -> str:
    """The characters of the Basic Multilingual Plane that do not show, as the inside of
    a regex character class (``\\uXXXX`` ranges), for a schema that says what
    ``has_visible`` says (a pattern has no portable escape beyond it)."""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        # Surrogates are no text at all (text_problem refuses them), and no validator
        # takes them in a pattern.
        if visible(chr(code)) or 0xD800 <= code <= 0xDFFF:
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
