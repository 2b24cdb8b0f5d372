"""sb_isotime(): the API's timestamp text, defined once in PostgreSQL

The read side's JSON statements wrote the same ``to_char`` pattern for every timestamp
they show (seven times in the full job's poll), which made that statement longer than
the 4,096 bytes up to which psycopg caches a query's parsing: it was parsed again on
every poll. A SQL function (STABLE, so the planner inlines it) says it once. SQLite
needs nothing: its JSON statements use their own short expression.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# ISO 8601 in UTC with six digits of microseconds, as ``isoformat(timespec="microseconds")``.
ISOTIME = """
CREATE OR REPLACE FUNCTION sb_isotime(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"') $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(ISOTIME)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS sb_isotime(timestamptz)")
