"""Cover images: a JPEG or PNG upload checked to really be one, by decoding it whole
(Pillow), within bounds of bytes and pixels that are checked before any decoding."""

from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError

from speechbatch.errors import ValidationError

MAX_COVER_BYTES = 10 * 2**20
MAX_COVER_SIDE = 4096  # pixels: 4096 x 4096 RGBA decodes to 64 MiB at most
_SIGNATURES = {
    b"\xff\xd8\xff": ("JPEG", "image/jpeg"),
    b"\x89PNG\r\n\x1a\n": ("PNG", "image/png"),
}
EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png"}


def stored_type(key: str) -> str:
    """The MIME type of a stored cover: its key ends with its extension."""
    return "image/png" if key.endswith(".png") else "image/jpeg"


def cover_type(data: bytes) -> str:
    """The MIME type of a cover (``image/jpeg`` or ``image/png``); ValidationError unless
    it is a whole JPEG or PNG of at most MAX_COVER_BYTES and MAX_COVER_SIDE a side."""
    if len(data) > MAX_COVER_BYTES:
        raise ValidationError(
            f"a cover is at most {MAX_COVER_BYTES // 2**20} MiB ({len(data)} bytes given)",
            field="cover",
        )
    found = [kind for signature, kind in _SIGNATURES.items() if data.startswith(signature)]
    if not found:
        raise ValidationError("a cover must be a JPEG or PNG image", field="cover")
    name, mime = found[0]
    try:
        with Image.open(io.BytesIO(data), formats=[name]) as image:
            width, height = image.size
            if max(width, height) > MAX_COVER_SIDE:
                raise ValidationError(
                    f"a cover is at most {MAX_COVER_SIDE} pixels a side ({width} x {height})",
                    field="cover",
                )
            image.load()
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
        raise ValidationError(f"the cover is not a readable {name} image", field="cover") from None
    return mime
