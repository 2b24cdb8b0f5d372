"""The service layer: plain verb functions over a unit of work. No Flask, no HTTP here.

Entry points (web, CLI) and scripts call the verbs named here; each lives in the module of
its concept (``jobs``, ``generation``, ``polls``, ``reads``, ``recovery``, ``users``).
"""

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import ReadScope
from speechbatch.domain.editing import Selection
from speechbatch.services.accounts import authenticate_token, create_token, hash_token
from speechbatch.services.documents import DOCUMENT_SUFFIXES, import_document, read_choices
from speechbatch.services.editing import selection_from_query, selection_of
from speechbatch.services.generation import RunStarter, start_generation
from speechbatch.services.jobs import (
    MAX_ITEMS,
    MAX_TITLE,
    Limits,
    create_job,
    parse_items_csv,
    parse_items_text,
    texts_of,
    validate_job,
)
from speechbatch.services.polls import (
    AUTHENTICATION_REQUIRED,
    Bearer,
    Conditional,
    lease_of,
    never_seen,
    read_job,
    read_job_items,
    read_jobs,
)
from speechbatch.services.reads import (
    database_is_up,
    get_items_page,
    get_job,
    get_job_summary,
    item_audio_key,
    list_jobs,
    open_reads,
)
from speechbatch.services.recovery import recover_all, recover_stale
from speechbatch.services.users import create_admin, get_user, reset_password

__all__ = [
    "AUTHENTICATION_REQUIRED",
    "DOCUMENT_SUFFIXES",
    "MAX_ITEMS",
    "MAX_TITLE",
    "Bearer",
    "Conditional",
    "Limits",
    "ReadScope",
    "RunStarter",
    "Selection",
    "UserRecord",
    "authenticate_token",
    "create_admin",
    "create_job",
    "create_token",
    "database_is_up",
    "get_items_page",
    "get_job",
    "get_job_summary",
    "get_user",
    "hash_token",
    "import_document",
    "item_audio_key",
    "lease_of",
    "list_jobs",
    "never_seen",
    "open_reads",
    "parse_items_csv",
    "parse_items_text",
    "read_choices",
    "read_job",
    "read_job_items",
    "read_jobs",
    "recover_all",
    "recover_stale",
    "reset_password",
    "selection_from_query",
    "selection_of",
    "start_generation",
    "texts_of",
    "validate_job",
]
