"""The Alembic migrations, both ways, and the check of the models against the database
(``flask db upgrade``, ``db downgrade``, ``db check``, and the tests' fixtures)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.runtime.migration import MigrationInfo
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from speechbatch.adapters.db import make_engine
from speechbatch.adapters.models import Base
from speechbatch.errors import MigrationFailed

MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "migrations"


@dataclass(frozen=True)
class Step:
    """One revision applied or reverted: its id and the first line of its docstring."""

    revision: str
    title: str


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: its revision (None: none applied) and the migrations' head."""

    current: str | None
    head: str


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at this project's migrations and the given database."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = database_url
    return cfg


def _migrate(database_url: str, revision: str, *, up: bool) -> list[Step]:
    """Run Alembic's upgrade or downgrade to ``revision``; the steps it ran, in order."""
    cfg = alembic_config(database_url)
    script = ScriptDirectory.from_config(cfg)
    steps: list[Step] = []

    def record(*, step: MigrationInfo, **_: Any) -> None:
        if step.is_migration and step.up_revision_id is not None:
            found = script.get_revision(step.up_revision_id)
            title = (found.doc or "").strip().splitlines()[0] if found is not None else ""
            steps.append(Step(step.up_revision_id, title))

    cfg.attributes["on_version_apply"] = record
    try:
        if up:
            command.upgrade(cfg, revision)
        else:
            command.downgrade(cfg, revision)
    except CommandError as exc:
        raise MigrationFailed(str(exc)) from exc
    return steps


def upgrade(database_url: str, revision: str = "head") -> list[Step]:
    """Bring the database up to ``revision`` (idempotent); the revisions applied, oldest
    first (none when it was there already)."""
    return _migrate(database_url, revision, up=True)


def downgrade(database_url: str, revision: str) -> list[Step]:
    """Take the database down to ``revision`` (``base``: no table left) by running each
    newer migration's downgrade; the revisions reverted, newest first."""
    return _migrate(database_url, revision, up=False)


def schema_state(database_url: str) -> SchemaState:
    """The database's revision and the migrations' head."""
    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    assert head is not None, "the migrations have one head (tests/integration/test_migrations)"
    engine = make_engine(database_url, pool=False)
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
    return SchemaState(current, head)


def schema_differences(database_url: str) -> list[str]:
    """What differs between the models and the database's schema, one line each (none:
    they agree), as Alembic's autogenerate compares them."""
    engine = make_engine(database_url, pool=False)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    return [describe_difference(d) for d in _flatten(diffs)]


def _flatten(diffs: list[Any]) -> list[tuple[Any, ...]]:
    # Alembic groups the changes of one column in a list of their own.
    flat: list[tuple[Any, ...]] = []
    for diff in diffs:
        flat.extend(_flatten(diff) if isinstance(diff, list) else [diff])
    return flat


_WHERE = {"add": "in the models but not in the database", "remove": "in the database only"}


def describe_difference(diff: tuple[Any, ...]) -> str:
    """One of Alembic's difference tuples in words: what, where, and which side has it."""
    kind = str(diff[0])
    action, _, thing = kind.partition("_")
    if action in _WHERE and thing == "table":
        return f"table {diff[1].name}: {_WHERE[action]}"
    if action in _WHERE and thing == "column":
        return f"column {diff[2]}.{diff[3].name}: {_WHERE[action]}"
    if action in _WHERE and thing in ("index", "constraint", "fk"):
        named = diff[1]
        table = getattr(getattr(named, "table", None), "name", None) or getattr(
            named, "parent", None
        )
        label = {"fk": "foreign key"}.get(thing, thing)
        return f"{label} {named.name} on {table}: {_WHERE[action]}"
    if action == "modify":
        table, column, database, model = diff[2], diff[3], diff[5], diff[6]
        return (
            f"column {table}.{column}: {thing} is {database!s} in the database,"
            f" {model!s} in the models"
        )
    return f"{kind}: {diff[1:]!r}"
