"""The schema built by replaying migrations equals the models, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from speechbatch.db import make_engine
from speechbatch.migrate import alembic_config, upgrade
from speechbatch.models import Base


def test_there_is_one_head(database_url: str) -> None:
    script = ScriptDirectory.from_config(alembic_config(database_url))
    assert len(script.get_heads()) == 1


def test_migrated_schema_matches_the_models(database_url: str) -> None:
    engine = make_engine(database_url, pool=False)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_upgrade_is_idempotent(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)
    engine = make_engine(database_url, pool=False)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"jobs", "items", "runs", "workers", "job_locks", "api_tokens"} <= tables


def test_recovery_indexes_exist(database_url: str) -> None:
    engine = make_engine(database_url, pool=False)
    try:
        names = {ix["name"] for ix in inspect(engine).get_indexes("items")}
    finally:
        engine.dispose()
    assert {"ix_items_job_id_updated_at", "ix_items_job_id_status"} <= names
