"""Small real EPUB files, built with ebooklib as a publisher's tool would."""

from __future__ import annotations

import io

from ebooklib import epub

CHAPTER_ONE = (
    "<h1>Chapter One</h1><p>It was a <em>bright</em> cold day in April.</p>"
    "<p>The clocks were striking thirteen.<img src='clock.png' alt='a clock'/></p>"
    "<h2 id='part-b'>Part B</h2><ul><li>Bread</li><li>Milk</li></ul>"
)
CHAPTER_TWO = (
    "<h1>Chapter Two</h1><p>The end came <a href='#x'>quietly</a>.</p><script>x=1</script>"
)
# What a listener hears, in order: the pages' text without images and scripts.
SPOKEN = (
    "Chapter One It was a bright cold day in April. The clocks were striking thirteen. "
    "Part B Bread Milk Chapter Two The end came quietly."
)


def build_epub(*, with_toc: bool = True) -> bytes:
    """An EPUB 3 of two chapters; with a table of contents of three entries (one an
    anchor inside the first chapter), or with none (only the spine)."""
    book = epub.EpubBook()
    book.set_identifier("speechbatch-test")
    book.set_title("A Test Book")
    book.set_language("en")
    one = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    one.content = CHAPTER_ONE
    two = epub.EpubHtml(title="Two", file_name="two.xhtml", lang="en")
    two.content = CHAPTER_TWO
    book.add_item(one)
    book.add_item(two)
    if with_toc:
        book.toc = [
            epub.Link("one.xhtml", "The First Chapter", "one"),
            epub.Link("one.xhtml#part-b", "Part B", "part-b"),
            epub.Link("two.xhtml", "The Second Chapter", "two"),
        ]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", one, two] if with_toc else [one, two]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()
