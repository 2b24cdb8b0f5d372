"""The piper provider's processes: speech made outside the caller, a dead one replaced,
none left behind when the process that started them is killed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from speechbatch.adapters.providers.piper import PiperProvider
from tests.integration.test_espeak_provider import mp3_frames
from tests.support.server import group_pids, wait_until

JOE = "en_US-joe-medium"


def seconds_of(mp3: bytes) -> float:
    return sum(samples for _, samples in mp3_frames(mp3)) / 22050


# Children this test process had before the module's provider started: other tests' Piper
# processes (a provider left open elsewhere in the same xdist worker), not this pool's.
_OTHERS: set[int] = set()


def _children() -> set[int]:
    return {child.pid for child in multiprocessing.active_children() if child.pid is not None}


def piper_pids() -> set[int]:
    """The Piper processes of the module's provider."""
    return _children() - _OTHERS


@pytest.fixture(scope="module")
def one_process() -> Iterator[PiperProvider]:
    _OTHERS.update(_children())
    provider = PiperProvider(processes=1)
    yield provider
    provider.close()


def test_speech_is_made_in_a_piper_process(one_process: PiperProvider) -> None:
    audio = one_process.synthesize("Made in another process.", JOE)
    assert seconds_of(audio) > 0.5
    assert piper_pids() and os.getpid() not in piper_pids()


def test_a_killed_piper_process_is_replaced(one_process: PiperProvider) -> None:
    one_process.synthesize("Before the crash.", JOE)
    (dead,) = piper_pids()
    os.kill(dead, signal.SIGKILL)
    wait_until(lambda: dead not in piper_pids(), 10.0, what="the killed process reaped")
    assert seconds_of(one_process.synthesize("After the crash.", JOE)) > 0.5
    assert piper_pids() and dead not in piper_pids()


def test_a_call_whose_process_dies_is_made_again(one_process: PiperProvider) -> None:
    one_process.synthesize("Warm.", JOE)
    (busy,) = piper_pids()
    text = " ".join(f"This is sentence number {n} of a long paragraph." for n in range(20))
    made: list[bytes] = []
    call = threading.Thread(target=lambda: made.append(one_process.synthesize(text, JOE)))
    call.start()
    call.join(0.5)
    assert call.is_alive(), "the call ended before its process could be killed"
    os.kill(busy, signal.SIGKILL)
    call.join(120)
    assert made and seconds_of(made[0]) > 20  # every sentence, from the new process
    assert busy not in piper_pids()


PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from speechbatch.adapters.providers.piper import PiperProvider

    provider = PiperProvider(processes=2)
    provider.synthesize("Started.", "en_US-joe-medium")
    print(" ".join(str(c.pid) for c in multiprocessing.active_children()), flush=True)
    time.sleep(600)
    """
)


def test_a_killed_parent_leaves_no_piper_process_behind() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert children, "the parent started no Piper process"
        assert set(children) <= set(group_pids(parent.pid))
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: not group_pids(parent.pid), 10.0, what="no Piper process left")
    finally:
        for pid in group_pids(parent.pid):
            os.kill(pid, signal.SIGKILL)
        if parent.stdout is not None:
            parent.stdout.close()
