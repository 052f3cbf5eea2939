"""The Database value every store uses, and its SQLite backend.

`with db.read() as conn` runs statements outside a transaction; `with db.write() as conn` runs them in
one transaction that takes the write lock first (SQLite BEGIN IMMEDIATE; PostgreSQL row locks as the
statements go), committed on success and rolled back on any exception. Backend errors surface as
StorageError so stores need not know which backend they run on.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

from bot.errors import ConfigError
from bot.storage.sqlite_recovery import check_sqlite_file, connect_read_only

log = logging.getLogger(__name__)

Backend = Literal["sqlite", "postgresql"]
Params = Sequence[object]

BUSY_TIMEOUT_MS = 10_000



def shown_target(target: str | Path) -> str:
    """A store's file or URL as it may be printed or logged: a URL's password becomes ***."""
    text = str(target)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")  # the last @: a password may hold one
    if not at or ":" not in userinfo:
        return text
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{path}"


class StorageError(Exception):
    """A statement or connection failed (locked file, lost server, constraint); message is one line."""


class Row(Protocol):
    """What a fetched row offers on both backends (sqlite3.Row and bot.storage.postgres.PgRow)."""

    def __getitem__(self, key: int | str) -> Any: ...

    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...

    def __iter__(self) -> Iterator[Row]: ...


def one(cursor: Cursor) -> Row:
    """The single row a statement must return (COUNT, INSERT … RETURNING)."""
    row = cursor.fetchone()
    if row is None:
        raise StorageError("the statement returned no row")
    return row


class Connection(Protocol):
    """The part of a DB-API connection stores use; SQL is written with `?` placeholders."""

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Params]) -> None: ...


class Database(ABC):
    backend: Backend
    label: str  # for messages: a file path or the server without its password

    @abstractmethod
    def read(self, timeout: float | None = None) -> AbstractContextManager[Connection]:
        """`timeout`: seconds to wait for a connection (a server backend; None: its default). The hot
        path of a Slack delivery passes a short one: an ack must not wait for a database that is down."""

    @abstractmethod
    def write(self, timeout: float | None = None) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def migration_lock(self) -> AbstractContextManager[Connection]:
        """A write transaction that also holds the database-wide migration lock."""

    @abstractmethod
    def ping(self, timeout: float | None = None) -> None:
        """Raise StorageError when the database cannot answer a trivial query (within `timeout`)."""

    @abstractmethod
    def close(self) -> None: ...

    def ddl(self, sql: str) -> str:
        """Schema text in this backend's dialect (migrations are written for SQLite)."""
        return sql


def _journal_mode_wal(conn: sqlite3.Connection) -> str:
    """Switch a file to WAL. The switch needs an exclusive lock, and SQLite reports "database is locked" at once
    (the busy handler is not consulted) when replicas open the same new file together: retry within the busy
    timeout; the first one switches it, the others then find it in WAL already."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class SQLiteDatabase(Database):
    """One file; WAL so readers never wait; one connection per thread, kept open (closing the last
    connection to a WAL file checkpoints it, ~3 ms a write otherwise)."""

    backend: Backend = "sqlite"

    def __init__(self, path: Path | str, what: str = "database", setting: str = "") -> None:
        self.path = Path(path).expanduser()
        self.label = str(self.path)
        self.what, self.setting = what, setting
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # A damaged file (truncated, overwritten, flipped bytes) is moved aside with one warning and a new
        # one started; a file this process cannot write opens read-only: reading commands still work.
        state = check_sqlite_file(self.path, what, setting or "its setting")
        self.read_only = state.read_only
        if self.read_only and not state.exists:
            raise ConfigError(f"the {what} {self.path} does not exist and cannot be created here (read-only"
                              + (f"; setting {setting})" if setting else ")"))
        try:
            if not self.read_only:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            if not self.read_only:
                mode = _journal_mode_wal(conn)
                if mode.lower() != "wal":  # e.g. a network file system: still correct, just slower
                    conn.execute("PRAGMA journal_mode = DELETE")
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the {what} {self.path}: {exc}") from exc
        if self.read_only:
            log.warning("the %s %s is read-only: reading works, nothing can be saved", what, self.path)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self.read_only:
                conn = connect_read_only(self.path, BUSY_TIMEOUT_MS / 1000)
            else:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                       check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: a commit survives a crash of the process
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def read(self, timeout: float | None = None) -> Iterator[Connection]:
        try:
            yield _SQLiteConnection(self._conn())
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: {exc}") from exc

    @contextmanager
    def write(self, timeout: float | None = None) -> Iterator[Connection]:  # a local file: the busy timeout rules
        if self.read_only:
            raise ConfigError(f"the {self.what} {self.path} is read-only; nothing can be saved"
                              + (f" (setting {self.setting})" if self.setting else ""))
        try:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteConnection(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path}: {exc}") from exc

    def migration_lock(self) -> AbstractContextManager[Connection]:
        return self.write()  # BEGIN IMMEDIATE is already exclusive for writers of this file

    def ping(self, timeout: float | None = None) -> None:
        with self.read() as conn:
            conn.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _SQLiteConnection:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return self._conn.execute(sql, tuple(params))  # type: ignore[return-value]

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._conn.executemany(sql, [tuple(r) for r in rows])
