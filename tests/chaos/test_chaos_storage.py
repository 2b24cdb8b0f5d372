"""An unwritable or vanished audio storage, on the fault scenarios' shared server: the
job's directory made immutable or replaced by a file mid-job, a rename target that is a
directory, and an audio file missing from disk. Items fail clearly, DONE audio stays
intact, no partial or temporary file is left, and a retry after the repair completes.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.fake_provider import fake_audio

from .chaos_helpers import new_tag, unique_texts, with_log
from .conftest import Stack
from .harness import (
    SETTLE_TIMEOUT,
    ChaosReport,
    Checks,
    Row,
    check_completed_job,
    done_texts,
    job_summary,
    temp_files,
)


def _chattr(flag: str, path: Path) -> bool:
    try:
        result = subprocess.run(
            ["chattr", flag, str(path)], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


class StorageBreak:
    """Make the job's audio directory unwritable for root, and repair it.

    - ``immutable``: ``chattr +i`` on the directory: mkstemp fails (EPERM) while the DONE
      files in it stay readable;
    - ``file``: the directory is moved aside and a regular file takes its name: the
      writer's mkdir fails (EEXIST); DONE audio is unreadable (404) until the repair.
    """

    def __init__(self, how: str, directory: Path) -> None:
        self.how = how
        self.directory = directory
        self.aside = directory.with_name(directory.name + ".aside")
        self.broken = False

    def break_it(self) -> bool:
        """Break the storage now; False when this filesystem cannot (chattr unsupported)."""
        if self.how == "immutable":
            self.broken = _chattr("+i", self.directory)
            return self.broken
        self.directory.rename(self.aside)
        self.broken = True
        self.directory.write_bytes(b"not a directory")
        return True

    def repair(self) -> None:
        """Undo it (idempotent; runs in finally)."""
        if not self.broken:
            return
        if self.how == "immutable":
            _chattr("-i", self.directory)
        else:
            if self.directory.is_file():
                self.directory.unlink()
            if self.aside.exists():
                self.aside.rename(self.directory)
        self.broken = False


@pytest.mark.parametrize("how", ["immutable", "file"])
def test_unwritable_storage_mid_job(stack: Stack, chaos_report: ChaosReport, how: str) -> None:
    """The audio directory becomes unwritable mid-job: the remaining items fail with "could
    not store audio", DONE audio stays intact, no partial file; after the repair a retry
    completes."""
    checks = Checks(f"seed={stack.seed} storage-{how}")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(f"{stack.seed}{how}"), new_tag(f"storage-{how}"), 9)
    row = chaos_report.add(Row(run=f"storage-{how}", fault=f"audio dir {how}", moment="done>=2"))
    job_dir: Path | None = None
    breaker: StorageBreak | None = None
    try:
        for text in texts:
            stack.fake.slow(text, 0.3)
        job_id = int(obs.create_job(texts, title=f"storage {how}")["id"])
        job_dir = stack.storage / "jobs" / str(job_id)
        breaker = StorageBreak(how, job_dir)
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        mid = obs.wait(job_id, lambda j: j["progress"]["done"] >= 2, SETTLE_TIMEOUT, "2 DONE", 0.02)
        if not breaker.break_it():
            pytest.skip("chattr +i is not supported on this filesystem")
        # A write in flight at the break made its temporary file before it; it can neither
        # be renamed nor removed in the broken directory, and gc sweeps such files once the
        # storage is repaired (it is removed below, as gc would). No write can start one
        # after the break, which is what "no partial file" checks.
        in_flight = set(temp_files(stack.storage))
        done_before = done_texts(mid)
        row.calls_before = stack.fake.calls_for(texts)
        t_break = time.monotonic()
        broken = obs.settled(job_id, SETTLE_TIMEOUT, "run ended on broken storage")
        row.recovery_s = time.monotonic() - t_break
        statuses = {i["text"]: i for i in broken["items"]}
        failed = [i for i in broken["items"] if i["status"] == "ERROR"]
        checks.check("some items failed", failed, job_summary(broken))
        checks.check(
            "they failed clearly: could not store audio",
            all((i["error_message"] or "").startswith("could not store audio: ") for i in failed),
            [i["error_message"] for i in failed],
        )
        checks.check(
            "job FAILED, run FAILED, nothing GENERATING",
            broken["status"] == "FAILED"
            and broken["runs"][-1]["outcome"] == "FAILED"
            and broken["progress"]["generating"] == 0,
            job_summary(broken),
        )
        checks.check(
            "items DONE before the break stay DONE",
            all(statuses[t]["status"] == "DONE" for t in done_before),
            job_summary(broken),
        )
        missing_answers: list[int] = []
        for item in broken["items"]:
            if item["status"] != "DONE":
                continue
            response = obs.audio(item["audio_url"])
            checks.check(
                "DONE audio answers while the storage is broken, never a 5xx",
                response is not None and response.status_code < 500,
                (item["id"], None if response is None else response.status_code),
            )
            assert response is not None
            if how == "immutable":
                checks.check(
                    "DONE audio readable and intact while the directory is immutable",
                    response.status_code == 200 and response.content == fake_audio(item["text"]),
                    (item["id"], response.status_code),
                )
            else:
                # The files are unreachable: never served as audio. (The status is checked by
                # test_audio_file_missing_on_disk_answers_404, which shows an app bug.)
                checks.check(
                    "unreachable DONE audio is not served as audio",
                    response.content != fake_audio(item["text"])
                    and not response.headers.get("Content-Type", "").startswith("audio/"),
                    (item["id"], response.status_code, response.headers.get("Content-Type")),
                )
                missing_answers.append(response.status_code)
        partial = set(temp_files(stack.storage)) - in_flight
        checks.check("no partial file", not partial, partial)
        breaker.repair()
        for leftover in temp_files(stack.storage):
            leftover.unlink()
        names = {p.name for p in job_dir.iterdir()}
        strays = [i["id"] for i in failed if f"{i['id']}-a1.mp3" in names]
        checks.check("no audio file for the failed items", not strays, strays)

        retry = obs.generate(job_id)
        checks.check("retry after the repair 202", retry.status_code == 202, retry.text[:300])
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before
        )
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = (
            f"{len(failed)} of 9 failed: {failed[0]['error_message']}"
            + (
                f"; DONE audio while moved away answered {sorted(set(missing_answers))}"
                if missing_answers
                else ""
            )
            + (f"; tmp-files in flight at the break={len(in_flight)}" if in_flight else "")
        )
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        if breaker is not None:
            breaker.repair()
        for text in texts:
            stack.fake.slow(text, None)


def test_unwritable_target_cleans_its_temp_file(stack: Stack, chaos_report: ChaosReport) -> None:
    """os.replace fails (a directory holds the audio file's name): that item fails with
    "could not store audio", its temporary file is removed, the others are DONE."""
    checks = Checks(f"seed={stack.seed} storage-replace")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("storage-replace"), 5)
    row = chaos_report.add(Row(run="storage-replace", fault="rename target is a dir"))
    blocker: Path | None = None
    try:
        job = obs.create_job(texts, title="storage replace")
        job_id = int(job["id"])
        victim = job["items"][2]
        blocker = stack.storage / "jobs" / str(job_id) / f"{victim['id']}-a1.mp3"
        (blocker / "keep").mkdir(parents=True)  # non-empty: os.replace cannot remove it
        row.moment = "before generate"
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        item = first["items"][2]
        checks.check(
            "the item failed clearly",
            item["status"] == "ERROR"
            and (item["error_message"] or "").startswith("could not store audio: "),
            item,
        )
        checks.check(
            "the others are DONE",
            [i["status"] for i in first["items"]] == ["DONE", "DONE", "ERROR", "DONE", "DONE"],
            job_summary(first),
        )
        checks.check("temporary file removed", not temp_files(stack.storage))
        shutil.rmtree(blocker)
        blocker = None
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        done_first = done_texts(first)
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_first
        )
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = str(item["error_message"])
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        if blocker is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(blocker)


def test_audio_file_missing_on_disk_answers_404(stack: Stack, chaos_report: ChaosReport) -> None:
    """APP BUG (found by the storage chaos): when an item's audio file is missing from the
    storage (a lost shared mount, a moved directory), the audio call must answer 404 as the
    contract says; it answers 200 with a JSON error body (web/api.py item_audio)."""
    checks = Checks(f"seed={stack.seed} missing-audio")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("missing-audio"), 2)
    row = chaos_report.add(Row(run="missing-audio", fault="audio file gone from disk"))
    moved: tuple[Path, Path] | None = None
    try:
        job_id = int(obs.create_job(texts, title="missing audio")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        job = obs.settled(job_id, SETTLE_TIMEOUT, "job finished")
        checks.check("COMPLETED", job["status"] == "COMPLETED", job_summary(job))
        item = job["items"][0]
        audio_path = stack.db.items(job_id)[0]["audio_path"]
        source = stack.storage / audio_path
        moved = (source, source.with_name(source.name + ".aside"))
        source.rename(moved[1])
        response = obs.audio(item["audio_url"])
        assert response is not None
        row.note = f"answered {response.status_code} {response.headers.get('Content-Type')}"
        checks.check(
            "a missing audio file answers 404 not_found (contract), not 200",
            response.status_code == 404
            and response.headers.get("Content-Type", "").startswith("application/json")
            and response.json()["error"]["code"] == "not_found",
            (response.status_code, response.headers.get("Content-Type"), response.text[:200]),
        )
        row.checks = checks.passed
        row.result = "ok"
    except AssertionError:
        row.result = "FAIL (app bug)"
        raise
    finally:
        if moved is not None and moved[1].exists():
            moved[1].rename(moved[0])
