"""Chaos suite (issue 5): randomized crashes and injected faults against real processes.

The ``test_chaos_*`` modules: real gunicorn processes on PostgreSQL, killed, frozen, cut off
from their database, fed a misbehaving provider and an unwritable disk.

After every fault the invariants of docs/DESIGN are checked from outside (API, tables,
storage directory, the fake provider's bill): no job left GENERATING, every run has a
history row and none stays RUNNING, the audio of every item is the provider's bytes for
its text, and no item is paid for again once it was DONE.
"""
