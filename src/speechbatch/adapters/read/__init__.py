"""The read side: answers shaped like the API's JSON, built by the database."""

from __future__ import annotations

from speechbatch.adapters.read.documents import DocumentCache
from speechbatch.adapters.read.views import (
    ITEM_STATUSES,
    JOB_STATUSES,
    ItemsPage,
    JobHead,
    JobPoll,
    JobViews,
    ListPage,
    ListStamp,
    Views,
    lease_variant,
    seen_version,
)

__all__ = [
    "ITEM_STATUSES",
    "JOB_STATUSES",
    "DocumentCache",
    "ItemsPage",
    "JobHead",
    "JobPoll",
    "JobViews",
    "ListPage",
    "ListStamp",
    "Views",
    "lease_variant",
    "seen_version",
]
