"""The document splitter: nothing dropped, no word cut, items within the size bound."""

from __future__ import annotations

import random
import string
import time

import pytest

from speechbatch.domain.documents import Section, split_document, spoken_text, squeeze

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "Mr.",
    "Dr.",
    "St.",
    "e.g.",
    "i.e.",
    "U.S.A.",
    "3.14",
    "1,000",
    "don't",
    "well-known",
    "naïve",
    "café",
    "—",
    "“quoted”",
    "(aside)",
    "[note]",
    "...",
    "?!",
    "etc.",
]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]
    if rng.random() < 0.05:  # a very long "word" (a URL, a chemical name)
        words.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(50, 600))))
    return " ".join(words) + rng.choice([".", "!", "?", "", "...", '."'])


def _paragraph(rng: random.Random) -> str:
    spaces = [" ", "  ", "\n", " \t "]
    return rng.choice(spaces).join(_sentence(rng) for _ in range(rng.randint(1, 12)))


def _document(rng: random.Random) -> list[Section]:
    sections = []
    for n in range(rng.randint(1, 6)):
        paragraphs = [_paragraph(rng) for _ in range(rng.randint(0, 8))]
        heading = rng.random() < 0.7
        if heading:
            paragraphs.insert(0, f"Chapter {n} " + _sentence(rng))
        sections.append(Section(f"Chapter {n}", tuple(paragraphs), heading))
    return sections


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("seed", range(60))
def test_generated_documents_keep_every_word(seed: int) -> None:
    rng = random.Random(seed)
    sections = _document(rng)
    max_chars = rng.choice([200, 300, 1500, 4096])
    split = split_document(sections, max_chars)
    joined = " ".join(item.text for item in split.items)
    spoken = spoken_text(sections)
    # The join invariant: the items are the document's spoken text, up to whitespace ...
    assert "".join(joined.split()) == spoken.replace(" ", "")
    # ... and exactly, spaces included, unless a word had to be cut.
    if all(len(word) <= max_chars for word in spoken.split()):
        assert squeeze(joined) == spoken
    # The size bound, and no empty item.
    assert all(0 < len(item.text) <= max_chars for item in split.items)
    # No word cut: every item ends where a word of the document ends, unless inside a
    # word longer than an item can be (the one cut there is).
    ends, long_spans, at = set(), [], 0
    for word in spoken.split():
        if len(word) > max_chars:
            long_spans.append((at, at + len(word)))
        at += len(word)
        ends.add(at)
    at = 0
    for item in split.items:
        at += len("".join(item.text.split()))
        assert at in ends or any(a < at < b for a, b in long_spans), item.text[-40:]
    assert split.chapters[0].first_position == 1


@pytest.mark.parametrize("seed", range(20))
def test_chapters_point_at_their_headings(seed: int) -> None:
    rng = random.Random(1000 + seed)
    sections = _document(rng)
    split = split_document(sections, 300)
    spoken = [s for s in sections if any(p.strip() for p in s.paragraphs)]
    assert [c.title for c in split.chapters] == [squeeze(s.title) for s in spoken]
    for chapter, section in zip(split.chapters, spoken, strict=True):
        first = split.items[chapter.first_position - 1]
        assert first.chapter == chapter.index
        if section.heading:
            assert (
                first.text == squeeze(section.paragraphs[0])[:300]
                or len(squeeze(section.paragraphs[0])) > 300
            )
    positions = [c.first_position for c in split.chapters]
    assert positions == sorted(positions)
    assert [i.chapter for i in split.items] == sorted(i.chapter for i in split.items)


def test_paragraphs_that_fit_share_an_item_and_long_ones_split_at_sentences() -> None:
    short = ["One short paragraph.", "Another one."]
    long = " ".join(f"Sentence number {n} is here." for n in range(40))
    split = split_document([Section("T", (*short, long), False)], 200)
    texts = [i.text for i in split.items]
    # Paragraphs that share an item keep a blank line between them.
    assert texts[0].startswith("One short paragraph.\n\nAnother one.")
    assert all(t.endswith(".") for t in texts)  # every cut at a sentence's end
    assert all(len(t) <= 200 for t in texts)


def test_a_sentence_longer_than_an_item_splits_between_words() -> None:
    sentence = " ".join(["word"] * 300) + "."
    split = split_document([Section("T", (sentence,), False)], 200)
    assert all(set(i.text.split()) <= {"word", "word."} for i in split.items)
    assert sum(len(i.text.split()) for i in split.items) == 300


def test_an_empty_section_makes_no_chapter() -> None:
    split = split_document([Section("Empty", ("  ", "\n"), True), Section("B", ("Hi.",))], 200)
    assert [(c.index, c.title, c.first_position) for c in split.chapters] == [(0, "B", 1)]


def test_a_long_paragraph_is_split_in_linear_time() -> None:
    # 260 KB of prose with no blank line: pysbd on it whole takes time that grows with the
    # square of its sentences (80 KB took 9 s); windows and a budget keep it to seconds.
    rng = random.Random(7)
    plain = [w for w in WORDS if w.isalpha()]
    sentences = [" ".join(rng.choices(plain, k=8)).capitalize() + "." for _ in range(5_000)]
    paragraph = " ".join(sentences)
    started = time.monotonic()
    split = split_document([Section("T", (paragraph,), False)], 1500)
    assert time.monotonic() - started < 8
    assert squeeze(" ".join(i.text for i in split.items)) == squeeze(paragraph)
    assert all(len(i.text) <= 1500 for i in split.items)
    # Every cut falls at a sentence's end, within the budget and past it.
    assert all(i.text.endswith(".") for i in split.items)
