"""The KB-growth SQLite file: feedback votes, candidates for new cases, submissions awaiting review.

One file (settings.kb_db_path), WAL mode so the bot's readers never wait for a writer, a busy timeout so
two processes (the bot and `vllm-doctor kb …`) can share it. One connection per thread, kept open:
sqlite3 connections must not be shared between threads, and closing the last connection to a WAL file
checkpoints it (~3 ms), which a connection per operation would pay on every vote.
Writes use BEGIN IMMEDIATE, so read-modify-write sequences (claiming a submission) are serialised.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.errors import ConfigError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    answer_id   TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    case_id     TEXT,              -- NULL: the answer was "unknown"
    verdict     TEXT NOT NULL,
    channel     TEXT NOT NULL,
    value       TEXT NOT NULL CHECK (value IN ('fixed', 'not_helpful')),
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (answer_id, user_id)
);
CREATE INDEX IF NOT EXISTS votes_by_case ON votes (case_id, user_id, updated_at);

CREATE TABLE IF NOT EXISTS candidates (
    id          INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,  -- sha256 of the masked root error lines: repeats fold into one row
    reason      TEXT NOT NULL CHECK (reason IN ('unknown', 'not_helpful')),
    summary     TEXT NOT NULL,         -- first root error line, redacted
    text        TEXT NOT NULL,         -- distilled evidence, redacted
    case_id     TEXT,                  -- the case that did not help (not_helpful)
    channel     TEXT,
    user_id     TEXT,
    answer_id   TEXT,
    seen        INTEGER NOT NULL DEFAULT 1,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    resolved_by TEXT                   -- case id that now covers this log
);

CREATE TABLE IF NOT EXISTS submissions (
    id            TEXT PRIMARY KEY,
    status        TEXT NOT NULL CHECK (status IN ('draft', 'pending', 'approving', 'approved', 'rejected')),
    kind          TEXT NOT NULL DEFAULT 'new' CHECK (kind IN ('new', 'example')),
    author_id     TEXT NOT NULL,
    author_name   TEXT NOT NULL DEFAULT '',
    channel       TEXT,
    message_ts    TEXT,
    permalink     TEXT,
    source_text   TEXT NOT NULL DEFAULT '',   -- redacted log the modal was opened on
    prefill_json  TEXT NOT NULL DEFAULT '{}', -- suggestions shown in the form
    case_json     TEXT,                       -- the validated case (kind new) or the example to add
    target_case   TEXT,                       -- kind example: the existing case to extend
    report_json   TEXT NOT NULL DEFAULT '{}', -- duplicates and warnings found before review
    review_json   TEXT NOT NULL DEFAULT '[]', -- [[channel, ts], …] of the review messages
    reviewer_id   TEXT,
    decided_at    REAL,
    note          TEXT,
    written_case  TEXT,
    written_path  TEXT,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (status, created_at);
"""


class Database:
    """Path + schema. `with db.read() as conn` / `with db.write() as conn` (one transaction)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._ready = False
        self._init_lock = threading.Lock()
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the KB database {self.path}: {exc} (setting VLLM_DOCTOR_KB_DB)") from exc
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        # WAL + NORMAL: a commit survives a crash of the process (not necessarily a power cut), at ~1 ms a write
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        with self._init_lock:
            if self._ready:
                return
            conn = self._connect()
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":  # e.g. a network file system; still correct, just slower
                    conn.execute("PRAGMA journal_mode = DELETE")
                conn.execute("BEGIN IMMEDIATE")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    conn.execute("ROLLBACK")
                    raise ConfigError(
                        f"{self.path} was written by a newer vllm-doctor (schema {version} > {SCHEMA_VERSION})"
                    )
                for statement in _SCHEMA.split(";\n"):  # not executescript(): it would COMMIT first
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise ConfigError(f"cannot initialise the KB database {self.path}: {exc}") from exc
            finally:
                conn.close()
            self._ready = True

    def _conn(self) -> sqlite3.Connection:
        self._ensure_schema()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        yield self._conn()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: committed on success, rolled back on any exception."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
