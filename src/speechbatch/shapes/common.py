"""Types every shape uses: ids, counts, timestamps, URLs, texts, the error answer."""

from __future__ import annotations

from typing import Annotated, TypedDict

from speechbatch.shapes.schema import Schema

Id = Annotated[int, Schema(minimum=1)]
Count = Annotated[int, Schema(minimum=0)]
Seconds = Annotated[float, Schema(minimum=0)]
# ISO 8601 with an explicit UTC offset.
Timestamp = Annotated[str, Schema(format="date-time")]
# A root-relative path of this server's API.
ApiUrl = Annotated[str, Schema(pattern="^/api/")]
# No NUL, which no database column can hold.
NO_NUL = "^[^\\u0000]*$"
# Text with at least one character that is not whitespace (in Python's sense as well as
# JSON Schema's: the server trims first) and no NUL.
NOT_BLANK = "^[^\\u0000]*[^\\s\\u0000\\u001c-\\u001f\\u0085][^\\u0000]*$"


class ErrorDetail(TypedDict):
    """What went wrong: a stable code and a message in words."""

    code: str
    message: str


class Error(TypedDict):
    """Every error answer."""

    error: ErrorDetail
