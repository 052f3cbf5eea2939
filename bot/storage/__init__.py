"""One storage layer for every piece of bot state, on two backends: an embedded SQLite file (the
default; `make demo` needs nothing else) or a PostgreSQL server shared by several replicas
(VLLM_DOCTOR_DATABASE_URL=postgresql://…).

Stores write one SQL dialect (the common subset of SQLite ≥ 3.35 and PostgreSQL: `?` placeholders,
ON CONFLICT upserts, RETURNING) and get rows addressable by name and position on both backends.
"""

from bot.storage.backends import open_database
from bot.storage.database import Connection, Database, Row, StorageError, one, shown_target
from bot.storage.migrations import Migration, SchemaTooNew

__all__ = [
    "Connection", "Database", "Migration", "Row", "SchemaTooNew", "StorageError", "one", "open_database",
    "shown_target",
]
