"""The schema built by replaying migrations equals the models, on both databases."""

from __future__ import annotations

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from speechbatch.adapters.db import make_engine
from speechbatch.adapters.migrate import alembic_config, downgrade, schema_differences, upgrade


def test_there_is_one_head(database_url: str) -> None:
    script = ScriptDirectory.from_config(alembic_config(database_url))
    assert len(script.get_heads()) == 1


def test_migrated_schema_matches_the_models(database_url: str) -> None:
    assert schema_differences(database_url) == []


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


def test_counters_migration_backfills_existing_jobs(database_url: str) -> None:
    """0004 fills the new progress counters from the items already there (a job made
    before it has the same counters as one made after)."""
    command.downgrade(alembic_config(database_url), "0003")
    statuses = ["DONE", "DONE", "ERROR", "PENDING", "GENERATING", "DONE"]
    engine = make_engine(database_url, pool=False)
    try:
        with engine.begin() as conn:
            org: int = conn.execute(
                text("INSERT INTO organizations (slug) VALUES ('old') RETURNING id")
            ).scalar_one()
            user: int = conn.execute(
                text(
                    "INSERT INTO users (organization_id, email, password_hash, is_admin)"
                    " VALUES (:org, 'old@old.test', 'x', true) RETURNING id"
                ),
                {"org": org},
            ).scalar_one()
            job_ids: list[int] = []
            for n in (len(statuses), 0):
                job_ids.append(
                    conn.execute(
                        text(
                            "INSERT INTO jobs (organization_id, created_by_id, title, voice,"
                            " status, attempt) VALUES (:org, :user, 'old', 'alloy', 'FAILED', 1)"
                            " RETURNING id"
                        ),
                        {"org": org, "user": user},
                    ).scalar_one()
                )
                for position, status in enumerate(statuses[:n]):
                    conn.execute(
                        text(
                            "INSERT INTO items (job_id, position, text, status)"
                            " VALUES (:job, :position, :text, :status)"
                        ),
                        {"job": job_ids[-1], "position": position, "text": f"t{position}",
                         "status": status},
                    )  # fmt: skip
    finally:
        engine.dispose()
    upgrade(database_url)
    engine = make_engine(database_url, pool=False)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT items_pending, items_generating, items_done, items_error, version"
                    " FROM jobs WHERE id IN (:a, :b) ORDER BY id"
                ),
                {"a": job_ids[0], "b": job_ids[1]},
            ).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in rows] == [(1, 1, 3, 1, 1), (0, 0, 0, 0, 1)]


def test_every_migration_downgrades_to_base_and_upgrades_again(database_url: str) -> None:
    """Whatever the number of revisions: each one's downgrade runs (newest first, down to
    no table at all), and the upgrade after it gives the schema of the models again."""
    revisions = [
        script.revision
        for script in ScriptDirectory.from_config(alembic_config(database_url)).walk_revisions()
    ]
    reverted = downgrade(database_url, "base")
    engine = make_engine(database_url, pool=False)
    try:
        left = set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()
    assert [step.revision for step in reverted] == revisions
    assert left == set()
    applied = upgrade(database_url)
    assert [step.revision for step in applied] == revisions[::-1]
    assert schema_differences(database_url) == []
