"""acquire_job_lock: the PostgreSQL function other services call to take a job lock

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 09:00:00.000000

The function is part of the external contract (CONTRACT.md, "Database API"). SQLite has
no stored functions: there the repository runs the same UPDATE + INSERT inside one
BEGIN IMMEDIATE transaction, so this migration does nothing on SQLite.

Why a plpgsql body and not one data-modifying CTE: the sub-statements of a WITH run in an
unspecified order, and an UPDATE CTE that the INSERT does not read runs after it, so the
INSERT would meet the expired row's index entry and raise 23505 even though the lock had
expired. Two statements in one function are still one atomic call for the caller.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ACQUIRE_JOB_LOCK = """
CREATE OR REPLACE FUNCTION acquire_job_lock(
    p_organization_id bigint, p_job_type text, p_holder text, p_ttl_seconds integer
) RETURNS SETOF job_locks
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds < 1 THEN
        RAISE EXCEPTION 'acquire_job_lock: p_ttl_seconds must be at least 1, not %',
            p_ttl_seconds USING ERRCODE = '22023';
    END IF;
    -- Release the live lock of this pair if its lease has run out. Concurrent callers
    -- queue on that row's lock; after the first commits, the others re-check the WHERE
    -- on the released version, update nothing, and their INSERT meets the new grant.
    UPDATE job_locks
       SET released_at = clock_timestamp()
     WHERE organization_id = p_organization_id
       AND job_type = p_job_type
       AND released_at IS NULL
       AND expires_at <= clock_timestamp();
    -- While an unexpired lock is live, the partial unique index uq_job_locks_live
    -- raises unique_violation (SQLSTATE 23505) here.
    RETURN QUERY
    INSERT INTO job_locks (organization_id, job_type, holder, acquired_at, expires_at)
    VALUES (p_organization_id, p_job_type, p_holder, clock_timestamp(),
            clock_timestamp() + make_interval(secs => p_ttl_seconds))
    RETURNING job_locks.*;
END;
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(ACQUIRE_JOB_LOCK)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS acquire_job_lock(bigint, text, text, integer)")
