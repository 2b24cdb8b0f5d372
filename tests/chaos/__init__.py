"""Chaos suite (issue 5): randomized crashes and injected faults against real processes."""
