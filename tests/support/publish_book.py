"""A short real book for the whole publishing path: an EPUB 3 with a title, an author and
a cover image, front matter (a title page and an imprint, which import leaves out), two
chapters of Stevenson's prose (about 1,000 characters in all, so that Piper speaks it in
seconds), a style sheet the chapters link and an image inside the text."""

from __future__ import annotations

import html
import io

from ebooklib import epub

from tests.support.epubs import BOOK_AUTHOR, BOOK_TITLE, PROSE, cover_png, png_bytes

CSS = "h2 { font-variant: small-caps; }\np.first { text-indent: 0; }\n.door { width: 40%; }\n"
IMAGE = "images/door.png"
# The chapters as the table of contents names them (what import keeps, and what the
# renders' chapters are called).
CHAPTERS = ["Story of the Door", "Search for Mr. Hyde"]
SEARCH = (
    "That evening Mr. Utterson came home to his bachelor house in sombre spirits and sat "
    "down to dinner without relish. It was his custom of a Sunday, when this meal was over, "
    "to sit close by the fire, a volume of some dry divinity on his reading desk, until the "
    "clock of the neighbouring church rang out the hour of twelve."
)
FRONT_MATTER = (
    ("titlepage.xhtml", "Title Page",
     f"<section epub:type='titlepage'><h1>{BOOK_TITLE}</h1><p>By {BOOK_AUTHOR}.</p></section>"),
    ("imprint.xhtml", "Imprint",
     "<section epub:type='imprint'><p>This edition was set from public-domain text by "
     "volunteers.</p></section>"),
)  # fmt: skip


def door_paragraphs() -> list[str]:
    """The opening of Stevenson's first chapter (tests/fixtures/prose): its first two
    sentences as one paragraph, and the first sentence of the next."""
    paragraphs = (PROSE / "stevenson-story-of-the-door.txt").read_text().split("\n\n")
    first, second = paragraphs[1], paragraphs[2]
    end = first.index("his life.") + len("his life.")
    return [first[:end], second[: second.index("London.") + len("London.")]]


def spoken_chapters() -> list[str]:
    """What a listener hears of each kept chapter: its heading, then its prose."""
    return [
        " ".join([CHAPTERS[0], *door_paragraphs()]),
        f"{CHAPTERS[1]} {SEARCH}",
    ]


def _door_page() -> str:
    one, two = (html.escape(p) for p in door_paragraphs())
    return (
        f"<h2>{CHAPTERS[0]}</h2><p class='first'>{one}</p>"
        f"<p><img class='door' src='{IMAGE}' alt='A door in a by-street'/></p><p>{two}</p>"
    )


def build_publish_epub() -> bytes:
    """The book (see the module's docstring), written with ebooklib as a publisher's
    tool would."""
    book = epub.EpubBook()
    book.set_identifier("speechbatch-publish")
    book.set_title(BOOK_TITLE)
    book.set_language("en")
    book.add_author(BOOK_AUTHOR)
    book.set_cover("cover.png", cover_png(), create_page=False)
    style = epub.EpubItem(
        uid="style", file_name="style/book.css", media_type="text/css", content=CSS
    )
    book.add_item(style)
    book.add_item(
        epub.EpubImage(uid="door", file_name=IMAGE, media_type="image/png", content=png_bytes())
    )
    pages = []
    chapters = (
        ("door.xhtml", CHAPTERS[0], _door_page()),
        ("search.xhtml", CHAPTERS[1], f"<h2>{CHAPTERS[1]}</h2><p>{SEARCH}</p>"),
    )
    for name, title, body in (*FRONT_MATTER, *chapters):
        page = epub.EpubHtml(title=title, file_name=name, lang="en")
        page.content = body
        page.add_item(style)
        book.add_item(page)
        pages.append(page)
    book.toc = [epub.Link(p.file_name, p.title, p.file_name.split(".")[0]) for p in pages]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *pages]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()
