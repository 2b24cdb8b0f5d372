"""gunicorn.conf.py's child_exit: in multiprocess metrics mode a worker that ended is
marked dead; without that mode nothing is touched."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from prometheus_client import multiprocess

ROOT = Path(__file__).resolve().parents[2]


def _gunicorn_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "gunicorn.conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pids: list[int] = []
    monkeypatch.setattr(multiprocess, "mark_process_dead", lambda pid, path=None: pids.append(pid))
    return pids


def test_an_ended_worker_is_marked_dead(
    marked: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    _gunicorn_conf().child_exit(SimpleNamespace(), SimpleNamespace(pid=4321))
    assert marked == [4321]


def test_without_multiprocess_mode_nothing_is_marked(
    marked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    _gunicorn_conf().child_exit(SimpleNamespace(), SimpleNamespace(pid=4321))
    assert marked == []
