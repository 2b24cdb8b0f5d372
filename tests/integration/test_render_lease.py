"""A render keeps its lock while it checks what it wrote (both databases): the check
decodes the whole file again, which for a long book lasts longer than the lock's lease."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import BinaryIO

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.audio import check
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.integration.test_renders import builders_end, start, wait_ended
from tests.support.render_audio import Tone, finished_job

TTL = 1.0


def test_a_check_that_outlasts_the_lease_keeps_the_render(
    client: FlaskClient,
    auth: dict[str, str],
    svc: Services,
    admin: UserRecord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = check.decode

    def slow(source: BinaryIO, rate: int) -> Iterator[Samples]:
        for piece in real(source, rate):
            time.sleep(0.045)  # 58 pieces of 576 samples: 2.6 s, over two leases
            yield piece

    monkeypatch.setattr(check, "decode", slow)
    # A render lock of a short lease (the renders' service reads it at each start).
    svc.settings = dataclasses.replace(svc.settings, render_lock_ttl_seconds=TTL)
    job_id = finished_job(svc, admin, [Tone("One.", 0.75), Tone("Two.", 0.75, 550)])
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format="mp3")["id"])
    assert done["status"] == "COMPLETED", done
    assert done["check"]["passed"] is True


__all__ = ["builders_end"]
