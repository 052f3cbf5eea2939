"""Versioned schema migrations per component ("slack", "audit", "kb", "cache", "jobs"), applied at start
under a database-wide lock, each in the same transaction as its version bump, so two replicas starting
together apply every step exactly once. A replica whose code knows fewer steps than the database has
refuses to start: it would write rows the newer schema does not expect.

Migrations are written in SQLite's dialect; Database.ddl() rewrites types for PostgreSQL. Keep them
idempotent (IF NOT EXISTS): version 1 of each component adopts files written before versioning existed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.errors import ConfigError
from bot.storage.database import Connection, Database

_VERSIONS = """CREATE TABLE IF NOT EXISTS schema_versions (
    component  TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,
    applied_at REAL NOT NULL
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str  # statements separated by ";\n"


class SchemaTooNew(ConfigError):
    """The database was migrated by a newer vllm-doctor than this one."""


def _statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";\n") if s.strip()]


def current_version(conn: Connection, component: str) -> int:
    row = conn.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
    return int(row[0]) if row is not None else 0


def migrate(db: Database, component: str, migrations: list[Migration]) -> int:
    """Bring `component` up to the newest migration; returns the version now in the database."""
    expected = [m.version for m in migrations]
    if expected != list(range(1, len(migrations) + 1)):
        raise ValueError(f"{component}: migrations must be numbered 1..n, got {expected}")
    if getattr(db, "read_only", False):
        # A file this process cannot write (reading commands): fine when it is already current.
        with db.read() as conn:
            have = current_version(conn, component)
        if have != len(migrations):
            raise SchemaTooNew(f"the {component} tables in {db.label} are read-only at schema version {have}, "
                               f"not {len(migrations)}; open it once with write access to migrate it")
        return have
    with db.migration_lock() as conn:
        conn.execute(db.ddl(_VERSIONS))
        have = current_version(conn, component)
        newest = len(migrations)
        if have > newest:
            raise SchemaTooNew(
                f"the {component} tables in {db.label} are at schema version {have}, but this vllm-doctor only "
                f"knows up to {newest}: a newer release migrated the database. Upgrade this replica "
                "(do not downgrade a shared database)."
            )
        for step in migrations[have:]:
            for statement in _statements(step.sql):
                conn.execute(db.ddl(statement))
            conn.execute(
                "INSERT INTO schema_versions (component, version, applied_at) VALUES (?, ?, ?) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version, applied_at = excluded.applied_at",
                (component, step.version, time.time()),
            )
        return max(have, newest)
