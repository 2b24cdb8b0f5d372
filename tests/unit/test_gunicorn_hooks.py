"""gunicorn's worker hook (gunicorn.conf.py): what it leaves set up in the worker."""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
import signal
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from speechbatch.runner import lifecycle as runner

ROOT = Path(__file__).resolve().parents[2]


def _gunicorn_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "gunicorn.conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker() -> SimpleNamespace:
    """What the hook uses of gunicorn's worker: its logger."""
    return SimpleNamespace(log=logging.getLogger("gunicorn.error"))


def test_the_worker_freezes_what_it_loaded_so_that_full_collections_skip_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The loaded app's objects leave the collector's generations: a full collection, a
    pause of every thread of the worker, no longer walks them. Then the worker says it
    is ready (the process tests wait for that line from every worker)."""
    started: list[bool] = []
    monkeypatch.setattr(runner, "start_background_all", lambda: started.append(True))
    previous = signal.getsignal(signal.SIGTERM)
    gc.unfreeze()
    caplog.set_level(logging.INFO, logger="gunicorn.error")
    try:
        _gunicorn_conf().post_worker_init(_worker())
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
        signal.signal(signal.SIGTERM, previous)
    assert started == [True]
    # This process's modules, pytest's and ours (tens of thousands of objects).
    assert frozen > 10_000
    assert f"speechbatch worker ready (pid: {os.getpid()})" in caplog.messages


def test_sigterm_in_the_worker_stops_starting_items_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[bool] = []
    seen: list[Any] = []
    monkeypatch.setattr(runner, "start_background_all", lambda: None)
    monkeypatch.setattr(runner, "stop_starting_items", lambda: stopped.append(True))
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        _gunicorn_conf().post_worker_init(_worker())
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
    finally:
        gc.unfreeze()
        signal.signal(signal.SIGTERM, previous)
    assert stopped == [True]
    assert seen == [signal.SIGTERM]  # gunicorn's own handler still runs after it
