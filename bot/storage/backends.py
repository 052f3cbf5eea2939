"""Which backend a store gets: a SQLite file for a path, the process-wide PostgreSQL pool for a
postgresql:// URL. Its own module so the PostgreSQL backend (which builds on bot/storage/database.py)
is imported only from here, lazily: no import cycle, and psycopg only when a server is configured.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from bot.storage.database import Database, SQLiteDatabase

_OPEN: dict[str, Database] = {}
_OPEN_LOCK = threading.Lock()


def is_server_url(target: str | Path) -> bool:
    return isinstance(target, str) and re.match(r"postgres(ql)?://", target) is not None


def open_database(target: str | Path, what: str = "database", setting: str = "") -> Database:
    """A Database for a file path (a new one each call: stores own their files) or the process-wide
    one for a postgresql:// URL (one pool per server, shared by every store). `what`/`setting` name the
    file in messages ("the KB database … (setting VLLM_DOCTOR_KB_DB)")."""
    if not is_server_url(target):
        return SQLiteDatabase(target, what, setting)
    key = str(target)
    with _OPEN_LOCK:
        found = _OPEN.get(key)
        if found is not None:
            return found
        from bot.storage.postgres import PostgresDatabase  # psycopg only when a server is configured

        db: Database = PostgresDatabase(key)
        _OPEN[key] = db
        return db


def forget(url: str) -> None:
    """Close and drop the shared Database of a server (tests that simulate a restart)."""
    with _OPEN_LOCK:
        db = _OPEN.pop(url, None)
    if db is not None:
        db.close()
