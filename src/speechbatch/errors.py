"""One exception hierarchy for the whole product.

Each class's docstring is its default message; ``code`` and ``status`` are what the
HTTP layer answers with, so the table of statuses lives here and nowhere else.
"""

from __future__ import annotations


class SpeechbatchError(Exception):
    """Something went wrong."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        super().__init__(self.message)


class ConfigError(SpeechbatchError):
    """The configuration is invalid."""

    code = "config_error"


class MigrationFailed(SpeechbatchError):
    """The migrations could not run."""

    code = "migration_failed"


class BadRequest(SpeechbatchError):
    """The request is malformed."""

    code = "bad_request"
    status = 400


class Unauthorized(SpeechbatchError):
    """Authentication is required."""

    code = "unauthorized"
    status = 401


class NotFound(SpeechbatchError):
    """Not found."""

    code = "not_found"
    status = 404


class ValidationError(SpeechbatchError):
    """The input is invalid."""

    code = "validation_error"
    status = 422

    def __init__(self, message: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidRule(ValidationError):
    """A lexicon rule cannot be used: nothing was changed."""

    code = "invalid_rule"


class UnsupportedRegex(InvalidRule):
    """A regex rule uses a construct that cannot run in linear time: nothing was changed."""

    code = "unsupported_regex"


class SpokenTextTooLong(ValidationError):
    """With the lexicon's rules this text would be spoken as more characters than an item
    may have: it is never sent nor billed."""

    code = "spoken_text_too_long"


class TooManyReplacements(ValidationError):
    """The lexicon's rules replace text in this line too often: it is never sent nor billed."""

    code = "too_many_replacements"


class IdempotencyKeyReused(ValidationError):
    """This Idempotency-Key was sent with another request (method, path or body) within
    the last 24 hours; use a new key for a new request."""

    code = "idempotency_key_reused"


class TooManySignIns(SpeechbatchError):
    """Too many failed sign-ins for this email from this address; try again later."""

    code = "too_many_requests"
    status = 429

    def __init__(self, retry_after_seconds: int) -> None:
        minutes = max(1, round(retry_after_seconds / 60))
        super().__init__(
            "Too many failed sign-ins for this email from your address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
        )
        self.retry_after_seconds = retry_after_seconds


class Conflict(SpeechbatchError):
    """The request conflicts with the current state."""

    code = "conflict"
    status = 409


class AlreadyExists(Conflict):
    """That already exists."""

    code = "already_exists"


class AlreadyGenerating(Conflict):
    """This job is already generating; wait for it to finish."""

    code = "already_generating"


class NothingToGenerate(Conflict):
    """Every item of this job already has its audio; use regenerate to pay for all again."""

    code = "nothing_to_generate"


class ExportInProgress(Conflict):
    """Another export of this organization is running."""

    code = "export_in_progress"


class RenderInProgress(Conflict):
    """A render of this job is running; wait for it to finish."""

    code = "render_in_progress"


class JobNotComplete(Conflict):
    """Every item of the job must be done (with its audio) before it can be rendered."""

    code = "job_not_complete"


class IdempotencyKeyInProgress(Conflict):
    """A request with this Idempotency-Key is still being processed; retry shortly."""

    code = "idempotency_key_in_progress"


class IdempotencyKeyTaken(IdempotencyKeyInProgress):
    """Another request took this Idempotency-Key over while this one was creating: this
    one created nothing, and answers what that one answers."""


class LockHeld(SpeechbatchError):
    """The organization-level lock is held by a live holder."""

    code = "lock_held"
    status = 409


class NotGenerating(Conflict):
    """This job has no live run to cancel."""

    code = "not_generating"


class BudgetExceeded(Conflict):
    """The organization's monthly budget cannot pay for any item this would send."""

    code = "budget_exceeded"


class DatabaseError(SpeechbatchError):
    """The database refused a statement."""

    code = "database_error"


class DatabaseUnavailable(DatabaseError):
    """The database is unavailable; try again shortly."""

    code = "unavailable"
    status = 503


class StorageUnreachable(SpeechbatchError):
    """The file storage did not answer; try again shortly."""

    code = "storage_unavailable"
    status = 503
