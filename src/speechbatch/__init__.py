"""speechbatch: crash-safe batch text-to-speech."""

from .app import create_app

__all__ = ["create_app"]
