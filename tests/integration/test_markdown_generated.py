"""Generated Markdown documents through the reader and the splitter (property tests).

tests/unit/test_import_split.py generates the reader's output (sections) directly; these
generate the Markdown itself, with the constructs a novel's source has (headings of three
levels, emphasis, links, images, inline and fenced code, lists, quotes), and the spoken
text the document must become. Then the invariants of the issue hold end to end: the
items' join is the spoken text, no item is over the bound, no word is cut, and each
heading of level 1 or 2 is its chapter's first item.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechbatch.adapters.documents import read_document
from speechbatch.domain.documents import split_document, spoken_text, squeeze

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14)
END = st.sampled_from([".", "!", "?", ",", ""])


@dataclass
class Doc:
    """Markdown source, the spoken text it must become, its chapter headings."""

    source: list[str] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    preface: bool = False  # spoken text before the first chapter heading


@st.composite
def inline(draw: st.DrawFn) -> tuple[str, str]:
    """One word in some markup: (its Markdown, what is read aloud)."""
    word = draw(WORD)
    kind = draw(st.sampled_from(["plain", "plain", "plain", "strong", "em", "link", "image"]))
    if kind == "strong":
        return f"**{word}**", word
    if kind == "em":
        return f"*{word}*", word
    if kind == "link":
        return f"[{word}](https://example.org/{word})", word
    if kind == "image":  # an image is not read aloud, nor its alt text
        return f"![{word}]({word}.png)", ""
    return word, word


@st.composite
def paragraph(draw: st.DrawFn) -> tuple[str, str]:
    """A paragraph of 1-60 words, maybe wrapped over lines: (Markdown, spoken)."""
    words = draw(st.lists(inline(), min_size=1, max_size=60))
    if all(not spoken for _, spoken in words):
        words.append(("last", "last"))
    end = draw(END)
    source, said = [], []
    for n, (markup, spoken) in enumerate(words):
        tail = end if n == len(words) - 1 else ""
        source.append(markup + tail)
        if spoken:
            said.append(spoken + tail)
        elif tail:  # the mark after an image stays, a space from the word before
            said.append(tail)
    breaks = draw(st.lists(st.booleans(), min_size=len(source), max_size=len(source)))
    text = "".join(w + ("\n" if b else " ") for w, b in zip(source, breaks, strict=True))
    return text.strip(), " ".join(said)


@st.composite
def markdown(draw: st.DrawFn) -> Doc:
    """A document of headings and blocks; what must be read aloud, and its chapters."""
    doc = Doc()
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["h1", "h2", "h3", "p", "p", "p", "list", "quote", "code"]))
        if kind.startswith("h"):
            words = draw(st.lists(WORD, min_size=1, max_size=6))
            title = " ".join(words).capitalize()
            doc.source.append("#" * int(kind[1]) + " " + title)
            doc.spoken.append(title)
            if kind != "h3":  # a heading of level 3 stays inside its chapter
                doc.headings.append(title)
            elif not doc.headings:
                doc.preface = True
        elif kind == "code":
            words = draw(st.lists(WORD, min_size=1, max_size=8))
            doc.source.append("```\n" + " ".join(words) + "\n```")
        elif kind == "list":
            entries = draw(st.lists(paragraph(), min_size=1, max_size=4))
            doc.source.append("\n".join(f"- {md.replace(chr(10), ' ')}" for md, _ in entries))
            doc.spoken.extend(spoken for _, spoken in entries)
            doc.preface = doc.preface or not doc.headings
        else:
            md, spoken = draw(paragraph())
            doc.source.append(("> " + md.replace("\n", " ")) if kind == "quote" else md)
            doc.spoken.append(spoken)
            doc.preface = doc.preface or not doc.headings
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=markdown(), max_chars=st.sampled_from([200, 300, 1500]))
def test_generated_markdown_is_read_whole_and_split_without_cuts(doc: Doc, max_chars: int) -> None:
    source = "\n\n".join(doc.source) + "\n"
    sections = read_document("gen.md", source.encode(), "Untitled")
    expected = squeeze(" ".join(doc.spoken))
    assert spoken_text(sections) == expected, source
    if not expected:
        return
    split = split_document(sections, max_chars)
    joined = squeeze(" ".join(item.text for item in split.items))
    # The join invariant, the size bound, and no empty item.
    assert joined == expected
    assert all(0 < len(item.text) <= max_chars for item in split.items)
    # No word cut (every word here fits in an item): each item ends where a word ends.
    ends, at = set(), 0
    for word in expected.split():
        at += len(word)
        ends.add(at)
    at = 0
    for item in split.items:
        at += len("".join(item.text.split()))
        assert at in ends, item.text[-40:]
    # Each heading of level 1 or 2 is a chapter, and its chapter's first item; what comes
    # before the first one is a chapter named after the document.
    titles = ["Untitled"] * doc.preface + doc.headings
    assert [c.title for c in split.chapters] == titles
    for chapter in split.chapters[doc.preface :]:
        assert split.items[chapter.first_position - 1].text == chapter.title
