"""PostgreSQL test databases made once and emptied between tests.

A ``CREATE DATABASE ... TEMPLATE`` writes the whole migrated schema (about 9 MB) through
the WAL and waits for its flush: about a third of a second here, for each of the
suite's eight hundred PostgreSQL tests. Emptying a used database (its rows deleted, its
sequences set back, the rows the migrations insert put back) takes a tenth of that.
A database whose schema a test changed (a downgrade, an added column) is dropped instead,
so every test still starts from the migrated schema and no row of an earlier test.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

VACUUM_EVERY = 20
# What a test may have changed that emptying the tables would not undo.
SCHEMA = """
SELECT (SELECT string_agg(version_num, ',') FROM alembic_version),
       (SELECT string_agg(table_name || '.' || column_name || ':' || data_type, ','
                          ORDER BY table_name, column_name)
          FROM information_schema.columns WHERE table_schema = 'public'),
       (SELECT string_agg(indexdef, ',' ORDER BY indexdef) FROM pg_indexes
         WHERE schemaname = 'public'),
       (SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace)
"""


class DatabasePool:
    """This process's databases copied from ``template`` (a migrated database)."""

    def __init__(self, admin_dsn: str, template: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = template
        self.free: list[str] = []
        self.made: list[str] = []
        self.uses = 0
        with self._connect(template) as conn:
            self.schema = conn.execute(SCHEMA).fetchone()
            self.tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                    " AND tablename <> 'alembic_version' ORDER BY tablename"
                )
            ]
            copies = {t: _copy_out(conn, t) for t in self.tables}
            self.seeds = {t: rows for t, rows in copies.items() if rows}
            self.sequences = conn.execute(
                "SELECT sequencename, start_value, last_value FROM pg_sequences"
                " WHERE schemaname = 'public'"
            ).fetchall()

    def take(self) -> str:
        """The name of an empty migrated database for one test."""
        if self.free:
            return self.free.pop()
        name = f"sb_test_{uuid.uuid4().hex[:12]}"
        with self._connect("postgres") as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(self.template)
                )
            )
        self.made.append(name)
        return name

    def give_back(self, name: str) -> None:
        """End every session of the test's database, then empty it for the next test (or
        drop it, when its schema is no longer the template's)."""
        self._end_sessions(name)
        with self._connect(name) as conn:
            reusable = conn.execute(SCHEMA).fetchone() == self.schema
            if reusable:
                self._empty(conn)
        if reusable:
            self.free.append(name)
        else:
            self._drop(name)

    def close(self) -> None:
        """Drop every database this pool made."""
        for name in self.made:
            self._drop(name)
        self.made, self.free = [], []

    def _empty(self, conn: psycopg.Connection[Any]) -> None:
        # DELETE, not TRUNCATE: a truncate makes new files for every table and index, and
        # their creation and fsync cost what the pool saves. Foreign keys are not checked
        # (replica role) since every table is emptied; setval, unlike ALTER SEQUENCE
        # RESTART, makes no new file either.
        statements: list[sql.Composable] = [sql.SQL("SET LOCAL session_replication_role = replica")]
        statements += [sql.SQL("DELETE FROM {}").format(sql.Identifier(t)) for t in self.tables]
        statements += [
            sql.SQL("SELECT setval({}, {}, {})").format(
                sql.Literal(name),
                sql.Literal(last_value or start),
                sql.Literal(last_value is not None),
            )
            for name, start, last_value in self.sequences
        ]
        with conn.transaction():
            conn.execute(sql.SQL("; ").join(statements))
            for table, rows in self.seeds.items():
                with conn.cursor().copy(
                    sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))
                ) as copy:
                    copy.write(rows)
        # Autovacuum is off on the test server: the deleted rows go every few uses.
        self.uses += 1
        if self.uses % VACUUM_EVERY == 0:
            conn.execute("VACUUM")

    def _end_sessions(self, name: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._connect("postgres") as conn:
            while conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise AssertionError(f"sessions of {name} outlived {timeout:g} s")
                time.sleep(0.01)

    def _drop(self, name: str) -> None:
        with self._connect("postgres") as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        if name in self.made:
            self.made.remove(name)

    def _connect(self, database: str) -> psycopg.Connection[Any]:
        dsn = self.admin_dsn.rsplit("/", 1)[0] + "/" + database
        return psycopg.connect(dsn, autocommit=True, connect_timeout=3)


def _copy_out(conn: psycopg.Connection[Any], table: str) -> bytes:
    with conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(sql.Identifier(table))) as copy:
        return b"".join(bytes(block) for block in copy)
