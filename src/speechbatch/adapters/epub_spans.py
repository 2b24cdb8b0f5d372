"""Spans put around located text in a book's own XHTML pages (lxml trees).

``TextSlots`` lists the text a listener hears in the pages, in document order: each
element's ``text`` and each ``tail``, leaving out what the import leaves out (scripts,
styles, images, SVG, MathML, the head). ``wrap`` puts a span around a located stretch:
inside one text node, or around a run of siblings when the stretch starts and ends
beside them under one parent and they are all inline. Anything else is refused (None),
and the caller syncs coarser. Stretches are wrapped in document order, so a slot's text
that a span split keeps being found in the span's tail.

The spans inside one text node are put in together, once the wrapping has moved on from
it (or at ``flush``, which the caller ends with): a node is read and split once, where
cutting its rest again for each span costs a paragraph of n sentences n times its length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lxml import etree

from speechbatch.adapters.epub import BLOCK_TAGS, SKIPPED_TAGS, local_name
from speechbatch.domain.text_locator import Point, TextStream

XHTML = "http://www.w3.org/1999/xhtml"


@dataclass
class Slot:
    """One text node: the element that holds it, whether it is its ``tail``, its page,
    and how many of its original characters spans have taken from its front."""

    element: Any
    tail: bool
    page: int
    taken: int = 0

    @property
    def value(self) -> str:
        found: str | None = self.element.tail if self.tail else self.element.text
        return found or ""

    def set(self, value: str) -> None:
        if self.tail:
            self.element.tail = value
        else:
            self.element.text = value


def _spoken_slots(body: Any, page: int) -> list[Slot]:
    """The body's text nodes that are heard, in document order."""
    slots: list[Slot] = []
    skipping = 0
    for event, element in etree.iterwalk(body, events=("start", "end")):
        left_out = not isinstance(element.tag, str) or local_name(element.tag) in SKIPPED_TAGS
        if event == "start":
            skipping += left_out
            if not skipping and element.text:
                slots.append(Slot(element, False, page))
        else:
            skipping -= left_out
            if not skipping and element is not body and element.tail:
                slots.append(Slot(element, True, page))
    return slots


class TextSlots:
    """The heard text of several pages' bodies, found and wrapped by position."""

    def __init__(self, bodies: list[Any]) -> None:
        self.slots = [
            slot for page, body in enumerate(bodies) for slot in _spoken_slots(body, page)
        ]
        self.stream = TextStream([slot.value for slot in self.slots])
        # Stretches waiting to be wrapped in one text node: (start, stop, anchor), as
        # offsets of its original text, in order.
        self._deferred_in = -1
        self._deferred: list[tuple[int, int, str]] = []

    def page_of(self, position: int) -> int:
        """The page where the character at ``position`` is."""
        return self.slots[self.stream.point(position).segment].page

    def block_of(self, position: int) -> Any:
        """The nearest block element around the character at ``position``."""
        slot = self.slots[self.stream.point(position).segment]
        element = slot.element.getparent() if slot.tail else slot.element
        while element.getparent() is not None and local_name(element.tag) not in BLOCK_TAGS:
            element = element.getparent()
        return element

    def wrap(self, start: int, end: int, anchor: str) -> bool:
        """Put a span with id ``anchor`` around the characters [start, end); whether it
        could be done without breaking the page's structure. A span inside one text node
        goes in when the wrapping leaves that node, or at ``flush``."""
        first, last = self.stream.point(start), self.stream.point(end - 1)
        if first.segment == last.segment:
            if self._deferred and self._deferred_in != first.segment:
                self.flush()
            self._deferred_in = first.segment
            self._deferred.append((first.offset, last.offset + 1, anchor))
            return True
        self.flush()  # it reads and cuts the slots itself: none may have spans waiting
        return self._wrap_siblings(first, last, anchor)

    def flush(self) -> None:
        """Put in the spans still waiting in a text node; call it once every stretch is
        wrapped, before the pages are read."""
        if not self._deferred:
            return
        slot = self.slots[self._deferred_in]
        text, taken = slot.value, slot.taken  # spans may have taken the node's front before
        cuts = [(start - taken, stop - taken, anchor) for start, stop, anchor in self._deferred]
        slot.set(text[: cuts[0][0]])
        follows = [start for start, _, _ in cuts[1:]] + [len(text)]
        before = slot
        for (start, stop, anchor), then in zip(cuts, follows, strict=True):
            span = etree.Element(f"{{{XHTML}}}span", id=anchor)
            span.text, span.tail = text[start:stop], text[stop:then]
            _insert_after_slot(before, span)
            before = Slot(span, True, slot.page, taken + stop)
        self.slots[self._deferred_in] = before
        self._deferred = []

    def _split(self, point: Point) -> tuple[Slot, int]:
        slot = self.slots[point.segment]
        return slot, point.offset - slot.taken

    def _wrap_siblings(self, first: Point, last: Point, anchor: str) -> bool:
        """Wrap a run of one parent's children: from a text node of the parent (or from
        an inline element the stretch opens) to a tail (or an inline element it closes)."""
        start_slot, at = self._split(first)
        end_slot, stop = self._split(last)
        closes = not end_slot.tail  # the stretch ends with an element's own text
        if closes and (len(end_slot.element) or end_slot.value[stop + 1 :].strip()):
            return False
        parent = end_slot.element.getparent()
        opens = (  # the stretch begins with an element's own text, nothing heard before it
            not start_slot.tail
            and start_slot.element is not parent
            and start_slot.element.getparent() is parent
            and not start_slot.value[:at].strip()
        )
        holder = (
            start_slot.element if opens or not start_slot.tail else start_slot.element.getparent()
        )
        if parent is None or (holder is not parent and not opens):
            return False
        if opens:
            first = start_slot.element
        else:
            first = start_slot.element.getnext() if start_slot.tail else parent[0]
        run = _run(first, end_slot.element)
        if not run or any(
            local_name(e.tag) in BLOCK_TAGS
            for child in run
            for e in child.iter()
            if isinstance(e.tag, str)
        ):
            return False
        span = etree.Element(f"{{{XHTML}}}span", id=anchor)
        if not opens:
            head = start_slot.value
            span.text = head[at:]
            start_slot.set(head[:at])
        # What follows the stretch becomes the span's tail: all of the closed element's
        # tail, or the rest of the tail the stretch ends in.
        tail = (end_slot.element.tail if closes else end_slot.value) or ""
        cut = 0 if closes else stop + 1
        span.tail = tail[cut:]
        run[0].addprevious(span)  # the span takes its own tail along
        for child in run:
            span.append(child)  # moves it, with its tail
        end_slot.element.tail = tail[:cut]
        self._moved_tail(last.segment, end_slot, span, closes, stop)
        return True

    def _moved_tail(self, segment: int, end_slot: Slot, span: Any, closes: bool, stop: int) -> None:
        """The text after the span is now the span's tail: where its slot is found."""
        if not closes:
            self.slots[segment] = Slot(span, True, end_slot.page, end_slot.taken + stop + 1)
            return
        after = segment + 1  # an element without children: its tail's slot comes next
        if after < len(self.slots) and self.slots[after].element is end_slot.element:
            kept = self.slots[after]
            self.slots[after] = Slot(span, True, kept.page, kept.taken)


def _run(first: Any, last: Any) -> list[Any]:
    """The siblings from ``first`` to ``last``, both in; empty when ``last`` does not
    follow. Only the run is walked: a paragraph of many inline elements, wrapped a
    sentence at a time, costs its length, not its length squared."""
    run = []
    element = first
    while element is not None:
        run.append(element)
        if element is last:
            return run
        element = element.getnext()
    return []


def _insert_after_slot(slot: Slot, span: Any) -> None:
    """Put ``span`` where the slot's text was cut: first child of the element whose text
    it is, or the next sibling of the element whose tail it is."""
    if slot.tail:
        slot.element.addnext(span)
    else:
        slot.element.insert(0, span)
