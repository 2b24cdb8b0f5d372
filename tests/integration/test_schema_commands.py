"""``flask db upgrade`` says what it applied, ``db downgrade REV`` reverts, and ``db
check`` names every difference between the models and the migrated database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from click.testing import Result
from flask import Flask
from sqlalchemy import text

from speechbatch import create_app
from speechbatch.adapters.db import make_engine
from speechbatch.adapters.migrate import alembic_config
from speechbatch.config import Settings
from tests.conftest import PG_URL_BASE, _pg_admin, close_services, services, with_settings
from tests.fakes import FakeProvider


def _db(app: Flask, *args: str) -> Result:
    return app.test_cli_runner().invoke(args=["db", *args])


def _revisions(url: str) -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config(url))
    return [s.revision for s in script.walk_revisions()][::-1]


@pytest.fixture
def empty_app(
    request: pytest.FixtureRequest, backend: str, settings: Settings, tmp_path: Path
) -> Iterator[Flask]:
    """The app on a database with no table at all."""
    name = f"sb_empty_{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        request.getfixturevalue("pg_available")
        with _pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = f"{PG_URL_BASE}/{name}"
    app = create_app(with_settings(settings, database_url=url), provider=FakeProvider())
    yield app
    close_services(services(app))
    if backend == "postgresql":
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_upgrade_names_each_revision_it_applies_then_says_there_was_nothing(
    empty_app: Flask,
) -> None:
    revisions = _revisions(services(empty_app).settings.database_url)
    first = _db(empty_app, "upgrade")
    again = _db(empty_app, "upgrade")
    assert first.exit_code == 0, first.output
    applied = [line.split(":")[0] for line in first.output.splitlines()[:-1]]
    assert applied == [f"applied {revision}" for revision in revisions]
    assert first.output.splitlines()[-1] == f"database is at {revisions[-1]} (the latest revision)"
    assert again.exit_code == 0, again.output
    assert (
        again.output
        == f"nothing to apply: the database is at {revisions[-1]} (the latest revision)\n"
    )


def test_downgrade_reverts_the_newer_revisions_and_upgrade_applies_them_again(app: Flask) -> None:
    revisions = _revisions(services(app).settings.database_url)
    target = revisions[-3]
    down = _db(app, "downgrade", target)
    check = _db(app, "check")
    up = _db(app, "upgrade")
    assert down.exit_code == 0, down.output
    assert [line.split(":")[0] for line in down.output.splitlines()] == [
        f"reverted {revisions[-1]}",
        f"reverted {revisions[-2]}",
        f"database is at {target}",
    ]
    assert check.exit_code == 1
    assert (
        f"the database is at {target}, not at the latest revision {revisions[-1]}" in check.output
    )
    assert [line.split(":")[0] for line in up.output.splitlines()[:2]] == [
        f"applied {revisions[-2]}",
        f"applied {revisions[-1]}",
    ]


def test_check_passes_on_the_migrated_database(app: Flask) -> None:
    result = _db(app, "check")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("the models and the migrations agree")


def test_check_names_each_difference_and_exits_non_zero(app: Flask) -> None:
    engine = make_engine(services(app).settings.database_url, pool=False)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX ix_jobs_status"))
            conn.execute(text("CREATE TABLE stray (id integer PRIMARY KEY)"))
            conn.execute(text("ALTER TABLE jobs ADD COLUMN extra text"))
    finally:
        engine.dispose()
    result = _db(app, "check")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "index ix_jobs_status on jobs: in the models but not in the database" in lines
    assert "table stray: in the database only" in lines
    assert "column jobs.extra: in the database only" in lines
    assert "3 difference(s) between the models and the migrations" in lines[-1]


def test_an_unknown_revision_is_one_line_and_exit_status_1(app: Flask) -> None:
    result = _db(app, "downgrade", "no_such_revision")
    assert result.exit_code == 1
    assert result.output == "Error: Can't locate revision identified by 'no_such_revision'\n"
