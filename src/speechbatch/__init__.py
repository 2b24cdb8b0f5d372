"""speechbatch: crash-safe batch text-to-speech."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from speechbatch.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, not with the package: a process that needs one small module of
    # it (a Piper process: the provider alone) does not import the app (180 MB, seconds).
    if name == "create_app":
        from speechbatch.app import create_app

        return create_app
    raise AttributeError(f"module 'speechbatch' has no attribute {name!r}")
