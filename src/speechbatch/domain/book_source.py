"""Where an imported EPUB is kept: one storage key per job, made from the job's
organization and id, so that no column has to name it. A read-along render of the job
reads the book's own pages, images and styles from it; the job's deletion and ``gc``
know it by its shape."""

from __future__ import annotations

import re

_KEY = re.compile(r"^sources/(\d{1,19})/job-(\d{1,19})/book\.epub$")


def source_key(organization_id: int, job_id: int) -> str:
    """The storage key of the EPUB a job was imported from."""
    return f"sources/{organization_id}/job-{job_id}/book.epub"


def job_of_source_key(key: str) -> tuple[int, int] | None:
    """(organization id, job id) of a source key; None for any other key."""
    match = _KEY.match(key)
    return None if match is None else (int(match.group(1)), int(match.group(2)))
