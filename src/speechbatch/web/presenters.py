"""How a job reads on a page: times, shares, the buttons that can work, the plain-words
banner of a run that ended early. Pure functions of the read side's JSON, no Flask."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from speechbatch.domain.statuses import JobStatus, RunOutcome


def format_when(value: str | None) -> str:
    """An ISO 8601 timestamp as ``YYYY-MM-DD HH:MM:SS UTC`` (empty for None)."""
    if not value:
        return ""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(seconds: float | None) -> str:
    """A length as players show it: ``M:SS`` under an hour, ``H:MM:SS`` from an hour on
    (``2:13:08``, never ``133:08``); whole seconds, rounded down; empty for None."""
    if seconds is None:
        return ""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def percent(progress: dict[str, int], key: str = "finished") -> int:
    """The share of a job's items that are finished (DONE or ERROR), or of one status."""
    total = progress.get("total", 0)
    if not total:
        return 0
    count = progress["done"] + progress["error"] if key == "finished" else progress[key]
    return round(100 * count / total)


def actions(job: dict[str, Any]) -> dict[str, bool]:
    """Which buttons can work for a job in its current state."""
    status = job["status"]
    not_done = job["progress"]["total"] - job["progress"]["done"]
    return {
        "generate": status == JobStatus.PENDING or (status == JobStatus.FAILED and not_done > 0),
        "regenerate": status in (JobStatus.COMPLETED, JobStatus.FAILED),
    }


def recovery_notice(job: dict[str, Any]) -> dict[str, str] | None:
    """A plain-words banner when the last run was auto-recovered or interrupted."""
    if job["status"] == JobStatus.GENERATING or not job.get("runs"):
        return None
    last = job["runs"][-1]
    progress = job["progress"]
    finished = f"{progress['done']} of {progress['total']} items are done."
    if last["outcome"] == RunOutcome.RECOVERED:
        what = (
            f"Run {last['attempt']} stopped unexpectedly (its server process crashed or "
            "stopped responding) and was recovered automatically."
        )
    elif last["outcome"] == RunOutcome.INTERRUPTED:
        what = (
            f"Run {last['attempt']} was interrupted because its server was shut down "
            "(for example during a deploy)."
        )
    elif last["outcome"] == RunOutcome.CANCELLED:
        who = f" by {last['cancelled_by']}" if last.get("cancelled_by") else ""
        what = f"Run {last['attempt']} was cancelled{who}; items in flight went back to pending."
    elif last["outcome"] == RunOutcome.OVER_BUDGET:
        what = (
            f"Run {last['attempt']} stopped because the organization's monthly budget ran out "
            f"({last['error_message']}). Raise the budget (set-budget) before retrying."
        )
    else:
        return None
    if progress["done"] < progress["total"]:
        advice = (
            "Retry resumes where it stopped: only the items that are not done are sent again, "
            "so you do not pay again for finished items."
        )
    else:
        advice = "Every item was already finished, so there is nothing to retry."
    titles = {
        RunOutcome.RECOVERED: "Auto-recovered.",
        RunOutcome.INTERRUPTED: "Interrupted.",
        RunOutcome.CANCELLED: "Cancelled.",
        RunOutcome.OVER_BUDGET: "Over budget.",
    }
    return {
        "kind": last["outcome"].lower(),
        "title": titles[last["outcome"]],
        "text": f"{what} {finished} {advice}",
    }
