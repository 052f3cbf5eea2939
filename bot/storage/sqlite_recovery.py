"""A damaged or read-only SQLite file, checked before a store opens it (KB growth, Slack state).

`check_sqlite_file` looks at the file once per process: a file that SQLite calls corrupt or "not a
database" (truncated, overwritten, flipped bytes) is moved aside to `<name>.corrupt-<time>` with its WAL
files, one warning line says so, and the store starts a new empty file, as the search index does. A file
that cannot be written is reported as read-only, so reading commands can still open it (`connect_read_only`).
Being locked by another process is not damage: only SQLITE_CORRUPT / SQLITE_NOTADB count.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from bot.errors import ConfigError

log = logging.getLogger(__name__)

_DAMAGE = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})
_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class FileState:
    read_only: bool  # the file (or its directory) cannot be written: open it with connect_read_only
    exists: bool
    quarantined: Path | None = None  # where a damaged file was moved


def check_sqlite_file(path: Path, what: str, setting: str) -> FileState:
    """Quarantine `path` if SQLite finds it damaged; say whether it can be written. Raises ConfigError
    (one line) only for a damaged file that cannot be moved aside."""
    writable_dir = os.access(path.parent, os.W_OK) if path.parent.exists() else True
    if not path.exists():
        return FileState(read_only=not writable_dir, exists=False)
    writable = writable_dir and os.access(path, os.W_OK)
    problem = damage(path)
    if problem is None:
        return FileState(read_only=not writable, exists=True)
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, target)
        for suffix in _SIDE_FILES:  # the WAL belongs to the damaged file; applied to a new one it would fail
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, target.with_name(target.name + suffix))
    except OSError as exc:
        raise ConfigError(
            f"{what} {path} is damaged ({problem}) and cannot be moved aside ({exc.strerror or exc}); "
            f"move or delete it, or point {setting} elsewhere"
        ) from None
    log.warning("%s %s was damaged (%s); moved it to %s and started a new one", what, path, problem, target.name)
    return FileState(read_only=False, exists=False, quarantined=target)


def damage(path: Path) -> str | None:
    """SQLite's own word on whether the file is damaged (quick_check, read-only); None when it is fine
    or cannot be told (e.g. locked)."""
    try:
        conn = connect_read_only(path)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return str(exc) if getattr(exc, "sqlite_errorname", "") in _DAMAGE else None
    if rows != [("ok",)]:
        return "; ".join(str(r[0]) for r in rows[:3])
    return None


def connect_read_only(path: Path, timeout_s: float = 10.0) -> sqlite3.Connection:
    """A read-only connection. A WAL file in a read-only directory has no -shm to share: then the file
    is opened as immutable (nobody can be writing it)."""
    uri = f"file:{quote(str(path))}"
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout_s, isolation_level=None)
        conn.execute("PRAGMA user_version").fetchone()
        return conn
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
            raise
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout_s, isolation_level=None)
