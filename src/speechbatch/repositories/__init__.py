"""Repositories: the only places that build SQL, one small module per concept."""
