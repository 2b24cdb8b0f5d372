"""Counts the characters lxml elements move in and out of their ``text`` and ``tail``: a
measure of how much work a tree edit does that, unlike a timer, is the same on every
machine and under any load (tests assert linear growth with it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lxml import etree


class Moved:
    """Characters read from and written to elements' ``text`` and ``tail``."""

    count = 0


def _counted(name: str) -> property:
    plain = getattr(etree.ElementBase, name)

    def read(element: Any) -> Any:
        value = plain.__get__(element)
        Moved.count += len(value or "")
        return value

    def write(element: Any, value: Any) -> None:
        Moved.count += len(value or "")
        plain.__set__(element, value)

    return property(read, write)


class _CountingElement(etree.ElementBase):
    text = _counted("text")
    tail = _counted("tail")


@contextmanager
def counting_parser() -> Iterator[etree.XMLParser]:
    """A parser whose elements count the text they move; the default parser for the
    block, so that the elements made with ``etree.Element`` count too."""
    parser = etree.XMLParser()
    parser.set_element_class_lookup(etree.ElementDefaultClassLookup(element=_CountingElement))
    etree.set_default_parser(parser)
    try:
        yield parser
    finally:
        etree.set_default_parser()
