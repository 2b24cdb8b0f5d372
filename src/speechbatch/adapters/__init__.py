"""Adapters: the database (engine, models, unit of work, repositories, read side), audio
storage, the text-to-speech providers, passwords and metrics."""
