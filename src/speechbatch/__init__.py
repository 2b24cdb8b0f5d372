"""speechbatch: crash-safe batch text-to-speech."""

from speechbatch.app import create_app

__all__ = ["create_app"]
