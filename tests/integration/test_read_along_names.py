"""A read-along's archive holds each entry once, inside it, on both databases: a manifest
href or a container ``full-path`` of an imported EPUB that climbs out of the archive
(``../``), is absolute, or names an entry the new book writes itself (the mimetype,
``META-INF/``, the package file, the new book's own folder) never becomes an entry of
the read-along. Such a resource is left out of the book made of the EPUB's own pages; such
a page or package file gives the plain book. epubcheck finds nothing either way."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from speechbatch.app import Services
from tests.integration.test_import_api import _import
from tests.integration.test_read_along_source import _book, _done
from tests.integration.test_renders import builders_end
from tests.support.epubs import STYLED_CSS, build_styled_epub

__all__ = ["builders_end"]

# Resources whose names are not the new book's to give, each with an entry it can read.
BAD_RESOURCES = {
    "../../outside.css": "../outside.css",
    "/abs/style.css": "/abs/style.css",
    "../META-INF/container.xml": None,
    "../mimetype": None,
    "content.opf": None,
    "speechbatch/nav.xhtml": "EPUB/speechbatch/nav.xhtml",
    "Style/Book.css": "EPUB/Style/Book.css",  # style/book.css, case aside
}


def _crafted(case: str) -> bytes:
    """The styled EPUB, made hostile in one way: ``resources`` (the manifest lists the
    resources above), ``page`` (its first page lies outside the archive), ``absolute``
    or ``climbing`` (the container's ``full-path`` is absolute, or climbs out)."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(build_styled_epub())) as source,
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as epub,
    ):
        for info in source.infolist():
            name, data = info.filename, source.read(info)
            if case == "resources" and name == "EPUB/content.opf":
                items = "".join(
                    f'<item id="bad-{n}" href="{href}" media-type="text/css"/>'
                    for n, href in enumerate(BAD_RESOURCES)
                )
                data = data.replace(b"</manifest>", items.encode() + b"</manifest>")
            if case == "page" and name in ("EPUB/content.opf", "EPUB/nav.xhtml", "EPUB/toc.ncx"):
                data = data.replace(b'"one.xhtml', b'"../../one.xhtml')
            if case == "page" and name == "EPUB/one.xhtml":
                name = "../one.xhtml"
            prefix = {"absolute": "/", "climbing": "../"}.get(case)
            if prefix and name == "META-INF/container.xml":
                data = data.replace(b'full-path="EPUB/', f'full-path="{prefix}EPUB/'.encode())
            if prefix and name.startswith("EPUB/"):
                name = prefix + name
            epub.writestr(name, data, info.compress_type)
        if case == "resources":
            for entry in BAD_RESOURCES.values():
                if entry:
                    epub.writestr(entry, b"p { color: red; }\n")
    return out.getvalue()


def _assert_each_entry_once_inside(names: list[str]) -> None:
    assert len({name.casefold() for name in names}) == len(names), names
    for name in names:
        parts = name.split("/")
        assert not name.startswith("/") and ".." not in parts and "." not in parts, names
    assert names[0] == "mimetype"


@pytest.mark.parametrize("case", ["resources", "page", "absolute", "climbing"])
def test_no_name_of_the_source_climbs_out_of_the_read_along_or_takes_one_of_ours(
    client: FlaskClient, auth: dict[str, str], svc: Services, tmp_path: Path, case: str
) -> None:
    imported = _import(client, auth, "hostile.epub", _crafted(case))
    assert imported.status_code == 201, imported.get_json()
    job = imported.get_json()
    _done(svc, job)
    data = _book(client, auth, job["id"], tmp_path)  # epubcheck: no errors, no warnings
    with zipfile.ZipFile(io.BytesIO(data)) as epub:
        names = epub.namelist()
        _assert_each_entry_once_inside(names)
        assert epub.read("mimetype") == b"application/epub+zip"
        container = epub.read("META-INF/container.xml")
        if case != "resources":  # the plain book
            assert b'full-path="EPUB/package.opf"' in container
            assert "EPUB/chapter-001.xhtml" in names
            return
        assert b'full-path="EPUB/content.opf"' in container
        assert b"bad-" not in epub.read("EPUB/content.opf")
        assert epub.read("EPUB/style/book.css").decode() == STYLED_CSS
        assert b"color: red" not in epub.read("EPUB/speechbatch/nav.xhtml")
        assert "EPUB/Style/Book.css" not in names  # the book's own, case aside, was first
        assert "EPUB/one.xhtml" in names
