"""The domain: statuses and pure rules, no I/O."""
