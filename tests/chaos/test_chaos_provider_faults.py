"""A misbehaving provider, on the fault scenarios' shared server (the ``stack`` fixture):
429 storms within and above the Retry-After cap, 5xx bursts, timeouts, malformed
answers and truncated audio. Each scenario programs the fake per item, checks what the
first run did to every item, and retries the job to COMPLETED without paying twice.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from .chaos_helpers import new_tag, unique_texts, with_log
from .chaos_provider import Answer
from .conftest import Stack
from .harness import (
    SETTLE_TIMEOUT,
    TTS_MAX_ATTEMPTS,
    TTS_TIMEOUT_SECONDS,
    ChaosReport,
    Checks,
    Row,
    billing_marks,
    check_completed_job,
    check_ledger,
    done_texts,
    job_summary,
    temp_files,
)


@dataclass(frozen=True)
class Expect:
    """What the first run does to one item: its status, its calls, its error message."""

    status: str
    calls: int
    message: str | None = None  # a substring of the item's error_message


@dataclass(frozen=True)
class Case:
    """One item of a fault scenario."""

    answers: tuple[Answer, ...]
    expect: Expect
    latency: float | None = None
    min_gap: float | None = None  # at least this long between its first two calls


def run_fault_scenario(
    stack: Stack, report: ChaosReport, name: str, fault: str, cases: list[Case]
) -> None:
    """Program the fake per item, run the job once, check each item, retry to COMPLETED."""
    checks = Checks(f"seed={stack.seed} {name}")
    obs = stack.observer(checks.context)
    rng = random.Random(f"{stack.seed}-{name}")
    texts = unique_texts(rng, new_tag(name), len(cases))
    row = report.add(Row(run=name, fault=fault, moment="first calls"))
    marks = billing_marks(stack.db, stack.fake)
    try:
        for text, case in zip(texts, cases, strict=True):
            stack.fake.program(text, *case.answers)
            if case.latency is not None:
                stack.fake.slow(text, case.latency)
        job_id = int(obs.create_job(texts, title=name)["id"])
        started = time.monotonic()
        response = obs.generate(job_id)
        checks.check("generate 202", response.status_code == 202, response.text[:300])
        # worst case of one item: 2 calls of 2 s and one capped wait; 3 items at a time
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        row.recovery_s = time.monotonic() - started
        counts = stack.fake.counts()
        row.calls_before = sum(counts.get(t, 0) for t in texts)
        for text, case, item in zip(texts, cases, first["items"], strict=True):
            got = (item["status"], counts.get(text, 0))
            checks.check(
                f"item {item['position']} after the fault: status and calls",
                got == (case.expect.status, case.expect.calls),
                (got, case.expect, item["error_message"]),
            )
            if case.expect.message is not None:
                checks.check(
                    f"item {item['position']} error message is clear",
                    case.expect.message in (item["error_message"] or ""),
                    (item["error_message"], case.expect.message),
                )
            if case.expect.status == "DONE":
                checks.check("DONE item has audio", item["audio_url"], item)
            if case.min_gap is not None:
                arrivals = stack.fake.arrivals(text)
                gap = arrivals[1] - arrivals[0] if len(arrivals) > 1 else None
                checks.check(
                    "the retry waited as asked, within the cap",
                    gap is not None and case.min_gap <= gap <= TTS_TIMEOUT_SECONDS + 1.5,
                    (gap, case.min_gap),
                )
        errors = sum(case.expect.status == "ERROR" for case in cases)
        runs = first["runs"]
        if errors:
            checks.check(
                "job FAILED with its failed items counted, run FAILED",
                first["status"] == "FAILED"
                and f"{errors} of {len(cases)} items failed" in (first["error_message"] or "")
                and [(r["attempt"], r["outcome"]) for r in runs] == [(1, "FAILED")],
                job_summary(first),
            )
        else:
            checks.check(
                "job COMPLETED in one run",
                first["status"] == "COMPLETED"
                and [(r["attempt"], r["outcome"]) for r in runs] == [(1, "COMPLETED")],
                job_summary(first),
            )
        for text in texts:
            stack.fake.slow(text, None)
            checks.check("every programmed answer used", stack.fake.pending_answers(text) == 0)
        done_first = done_texts(first)
        final = first
        if errors:
            retry = obs.generate(job_id)
            checks.check("retry 202 attempt 2", retry.status_code == 202, retry.text[:300])
            final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        by_text = dict(zip(texts, cases, strict=True))
        check_completed_job(
            checks,
            obs,
            stack.db,
            stack.storage,
            final,
            texts,
            billed_once=[t for t in done_first if by_text[t].expect.calls == 1],
            max_calls=lambda t: by_text[t].expect.calls + (by_text[t].expect.status == "ERROR"),
        )
        checks.check("no temporary file left", not temp_files(stack.storage))
        check_ledger(checks, stack.db, stack.fake, marks)
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"first run {first['status']} in {row.recovery_s:.1f}s; retry completes"
        row.recovery_s = None
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc


OK = Expect("DONE", 1)


def test_429_storm_within_the_cap_is_retried(stack: Stack, chaos_report: ChaosReport) -> None:
    """Every item's first call is a 429 asking to wait 1 s (cap: 2 s): all retried, DONE."""
    storm = Case((Answer.error(429, "slow down", retry_after="1"),), Expect("DONE", 2), None, 1.0)
    run_fault_scenario(stack, chaos_report, "429<=cap", "429 Retry-After 1s on all 6", [storm] * 6)


def test_429_above_the_cap_fails_rate_limited(stack: Stack, chaos_report: ChaosReport) -> None:
    """A 429 asking for more than the call timeout fails the item at once, as rate-limited."""
    cases = [
        Case(
            (Answer.error(429, "quota", retry_after="5"),),
            Expect("ERROR", 1, "rate limited: provider asked to wait 5 s, more than the 2 s cap"),
        ),
        Case(
            (Answer.error(429, "quota", retry_after="120"),),
            Expect("ERROR", 1, "rate limited: provider asked to wait 120 s"),
        ),
        Case((), OK),
        Case((), OK),
    ]
    run_fault_scenario(stack, chaos_report, "429>cap", "429 Retry-After 5s/120s", cases)


def test_5xx_burst_is_retried(stack: Stack, chaos_report: ChaosReport) -> None:
    """One 5xx per item is retried; two in a row exhaust MAX_ATTEMPTS with a clear message."""
    cases = [
        Case((Answer.error(status, "upstream hiccup"),), Expect("DONE", 2))
        for status in (500, 502, 503, 504, 500)
    ]
    cases.append(
        Case(
            (Answer.error(503, "overloaded"), Answer.error(503, "still overloaded")),
            Expect("ERROR", TTS_MAX_ATTEMPTS, "gave up after 2 attempts: provider answered 503"),
        )
    )
    run_fault_scenario(stack, chaos_report, "5xx-burst", "500/502/503/504 burst", cases)


def test_timeouts_fail_after_max_attempts(stack: Stack, chaos_report: ChaosReport) -> None:
    """A provider slower than the call timeout: the item fails after MAX_ATTEMPTS calls."""
    slow = TTS_TIMEOUT_SECONDS + 1.0
    cases = [
        Case((), Expect("ERROR", TTS_MAX_ATTEMPTS, "provider timed out after 2 s"), slow),
        Case((), OK),
        Case((), OK),
        Case((), OK),
    ]
    run_fault_scenario(stack, chaos_report, "timeout", f"latency {slow:g}s > timeout 2s", cases)


def test_malformed_answers(stack: Stack, chaos_report: ChaosReport) -> None:
    """Empty 200s are retried, a non-JSON 400 fails with its text, a non-JSON 500 is retried,
    a JSON 4xx fails with the provider's message, a truncated 200 is never stored as audio."""
    html = "<html><body><h1>400 Bad Request</h1>nginx proxy says no</body></html>"
    cases = [
        Case((Answer.empty_200(),), Expect("DONE", 2)),
        Case(
            (Answer.empty_200(), Answer.empty_200()),
            Expect("ERROR", 2, "gave up after 2 attempts: empty audio"),
        ),
        Case(
            (Answer.text(400, html),),
            Expect("ERROR", 1, "provider answered 400: <html><body><h1>400 Bad Request</h1>"),
        ),
        Case((Answer.text(500, "upstream exploded", "text/plain"),), Expect("DONE", 2)),
        Case(
            (Answer.error(422, "input contains unsupported characters"),),
            Expect("ERROR", 1, "provider answered 422: input contains unsupported characters"),
        ),
    ]
    run_fault_scenario(stack, chaos_report, "malformed", "empty 200, text 400/500, 422", cases)


def test_truncated_audio_is_never_stored(stack: Stack, chaos_report: ChaosReport) -> None:
    """A 200 whose body stops halfway (Content-Length says more): never a DONE item with
    half an MP3. Retried (a network failure) or failed with a clear message: both are fine,
    and the retry of the job completes with intact audio."""
    checks = Checks(f"seed={stack.seed} truncated")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("truncated"), 3)
    row = chaos_report.add(Row(run="truncated", fault="200 with half the body", moment="first"))
    try:
        stack.fake.program(texts[0], Answer.truncated_200(texts[0]))
        job_id = int(obs.create_job(texts, title="truncated")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        item = first["items"][0]
        calls = stack.fake.calls(texts[0])
        checks.check(
            "truncated answer retried to DONE, or failed clearly",
            (item["status"] == "DONE" and calls == 2)
            # A cut-off answer is a transient network fault: retried up to MAX_ATTEMPTS.
            or (item["status"] == "ERROR" and 1 <= calls <= 2 and item["error_message"]),
            (item, calls),
        )
        final = first
        if first["status"] != "COMPLETED":
            checks.check("retry 202", obs.generate(job_id).status_code == 202)
            final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        # A cut-off answer is retried within its run: up to MAX_ATTEMPTS calls per run.
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts,
            max_calls=lambda text: 2 * len(final["runs"]),
        )  # fmt: skip
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"first run: item {item['status']} {item['error_message'] or ''}"[:120]
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
