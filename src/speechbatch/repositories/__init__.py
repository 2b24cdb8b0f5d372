"""Repositories, one per concept: the only modules that build SQL for it."""
