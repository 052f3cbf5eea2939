"""The KB-growth store: feedback votes, candidates for new cases, submissions awaiting review.

Lives in bot/storage: its own SQLite file (settings.kb_db_path) or the shared PostgreSQL server
(VLLM_DOCTOR_DATABASE_URL), so every replica sees every vote and submission. Opened on first use.
Writes are single transactions that take the write lock first (SQLite BEGIN IMMEDIATE, row locks on
PostgreSQL), so read-modify-write sequences (claiming a submission) are serialised.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.errors import ConfigError
from bot.storage import Connection, Migration, StorageError, open_database, shown_target
from bot.storage import Database as Storage
from bot.storage.migrations import SchemaTooNew, migrate

MIGRATIONS = [
    Migration(1, "votes, candidates, submissions", """
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
CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (status, created_at)
"""),
    Migration(2, "kb_changes: case files shared between replicas (bot/kb_growth/sync.py)", """
CREATE TABLE IF NOT EXISTS kb_changes (
    version INTEGER PRIMARY KEY AUTOINCREMENT,
    relpath TEXT NOT NULL,
    content TEXT NOT NULL,
    replica TEXT NOT NULL,
    created REAL NOT NULL
)
"""),
    Migration(3, "candidates keep their root line, component, versions and threads; votes keep the evidence", """
ALTER TABLE candidates ADD COLUMN root_text TEXT;
ALTER TABLE candidates ADD COLUMN component TEXT;
ALTER TABLE candidates ADD COLUMN versions TEXT NOT NULL DEFAULT '{}';
ALTER TABLE votes ADD COLUMN evidence TEXT;
CREATE TABLE IF NOT EXISTS candidate_threads (
    candidate_id INTEGER NOT NULL,
    thread       TEXT NOT NULL,      -- channel/thread ts: pastes from one thread count once
    channel      TEXT,
    permalink    TEXT,
    seen_at      REAL NOT NULL,
    PRIMARY KEY (candidate_id, thread)
);
CREATE TABLE IF NOT EXISTS cluster_drafts (
    signature     TEXT PRIMARY KEY,  -- a drafted case is posted to reviewers once
    submission_id TEXT NOT NULL,
    created_at    REAL NOT NULL
)
"""),
]


class Database:
    """Where the KB-growth tables live. `with db.read() as conn` / `with db.write() as conn` (one
    transaction)."""

    def __init__(self, target: Path | str):
        self.target = target
        self.path = target if isinstance(target, str) and "://" in target else Path(target)
        self._storage: Storage | None = None
        self._init_lock = threading.Lock()

    @property
    def storage(self) -> Storage:
        if self._storage is not None:
            return self._storage
        with self._init_lock:
            if self._storage is None:
                try:
                    storage = open_database(self.path, "KB database", "VLLM_DOCTOR_KB_DB")
                    migrate(storage, "kb", MIGRATIONS)
                except SchemaTooNew:
                    raise
                except ConfigError as exc:
                    if "VLLM_DOCTOR_KB_DB" in str(exc):  # already says which file and setting
                        raise
                    raise ConfigError(f"cannot open the KB database {shown_target(self.path)}: {exc} "
                                      "(setting VLLM_DOCTOR_KB_DB or VLLM_DOCTOR_DATABASE_URL)") from exc
                except StorageError as exc:
                    raise ConfigError(f"cannot open the KB database {shown_target(self.path)}: {exc} "
                                      "(setting VLLM_DOCTOR_KB_DB or VLLM_DOCTOR_DATABASE_URL)") from exc
                self._storage = storage
        return self._storage

    @property
    def read_only(self) -> bool:
        """The SQLite file cannot be written here: reading commands work, saving says why not."""
        return bool(getattr(self.storage, "read_only", False))

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.storage.read() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One transaction: committed on success, rolled back on any exception."""
        with self.storage.write() as conn:
            yield conn
