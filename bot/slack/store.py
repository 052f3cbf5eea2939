"""What the Slack bot must remember across restarts, in one SQLite file (VLLM_DOCTOR_SLACK_STATE_DB):

    answers        the minimum the buttons on an answer need (case, verdict, evidence, where it lives)
    feedback       who pressed "Fixed it" / "Didn't help" on which answer (shown on the Home tab)
    thread_hosts   the last host diagnosis of each thread, whose facts later explanations there use

WAL mode, a busy timeout and one short transaction per write on its own connection, so worker threads
and a second bot process never step on each other. Rows older than the retention (and beyond MAX_ROWS
per table) are pruned at start and every PRUNE_EVERY writes. A failing write or read is logged and
treated as "not remembered": bookkeeping never costs anyone an answer.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.slack.recent import AnswerRecord
from bot.slack.thread_facts import ThreadHostFacts
from bot.sqlite_recovery import check_sqlite_file

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_ROWS = 50_000  # per table; with the age limit, keeps the file at a few tens of MB at most
PRUNE_EVERY = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    answer_id  TEXT PRIMARY KEY,
    user_id    TEXT,
    channel_id TEXT NOT NULL,
    thread_ts  TEXT,
    message_ts TEXT,
    verdict    TEXT NOT NULL,
    case_id    TEXT,
    title      TEXT,
    evidence   TEXT NOT NULL,          -- distilled, redacted evidence lines
    created    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS answers_by_user ON answers (user_id, created);
CREATE INDEX IF NOT EXISTS answers_by_age ON answers (created);
CREATE TABLE IF NOT EXISTS feedback (
    answer_id TEXT NOT NULL REFERENCES answers(answer_id) ON DELETE CASCADE,
    user_id   TEXT NOT NULL,
    value     TEXT NOT NULL CHECK (value IN ('fixed', 'not_helpful')),
    PRIMARY KEY (answer_id, user_id)
);
CREATE TABLE IF NOT EXISTS thread_hosts (
    channel_id TEXT NOT NULL,
    thread_ts  TEXT NOT NULL,
    target     TEXT NOT NULL,
    hosts      TEXT NOT NULL,          -- JSON list of host names
    facts      TEXT NOT NULL,          -- JSON list of redacted fact lines
    created    REAL NOT NULL,
    PRIMARY KEY (channel_id, thread_ts)
);
CREATE INDEX IF NOT EXISTS thread_hosts_by_age ON thread_hosts (created);
"""


class SlackStateDB:
    def __init__(self, path: Path | str, retention_s: float, clock: Any = time.time) -> None:
        self.path = Path(path).expanduser()
        self.retention_s = retention_s
        self._clock = clock
        self._writes = 0
        self._count_lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            check_sqlite_file(self.path, "Slack state file", "VLLM_DOCTOR_SLACK_STATE_DB")  # damaged: moved aside
            with closing(self._connect()) as db:
                if str(db.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower() != "wal":
                    log.info("%s: WAL not available here (network file system?); using a rollback journal", self.path)
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise ConfigError(f"{self.path} was written by a newer vllm-doctor (schema {version})")
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"Slack state file {self.path}: {exc} (setting VLLM_DOCTOR_SLACK_STATE_DB)") from exc
        self.prune()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = NORMAL")  # with WAL: a commit survives a crash of the process
        return db

    def _write(self, what: str, statements: list[tuple[str, tuple[Any, ...]]]) -> bool:
        try:
            with closing(self._connect()) as db:
                db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, params in statements:
                        db.execute(sql, params)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            log.warning("could not remember %s in %s: %s", what, self.path, exc)
            return False
        with self._count_lock:
            self._writes += 1
            due = self._writes % PRUNE_EVERY == 0
        if due:
            self.prune()
        return True

    def _read(self, what: str, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        try:
            with closing(self._connect()) as db:
                db.row_factory = sqlite3.Row
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            log.warning("could not read %s from %s: %s", what, self.path, exc)
            return []

    def prune(self) -> None:
        cutoff = self._clock() - self.retention_s
        statements: list[tuple[str, tuple[Any, ...]]] = []
        for table in ("answers", "thread_hosts"):
            statements.append((f"DELETE FROM {table} WHERE created < ?", (cutoff,)))
            statements.append((
                f"DELETE FROM {table} WHERE created < (SELECT created FROM {table} ORDER BY created DESC "
                "LIMIT 1 OFFSET ?)", (MAX_ROWS - 1,),
            ))
        try:
            with closing(self._connect()) as db:
                db.execute("BEGIN IMMEDIATE")
                for sql, params in statements:
                    db.execute(sql, params)
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            log.warning("could not prune %s: %s", self.path, exc)

    # --- answers ------------------------------------------------------------------------------------------
    def save_answer(self, r: AnswerRecord) -> bool:
        statements: list[tuple[str, tuple[Any, ...]]] = [(
            "INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (answer_id) DO UPDATE SET "
            "thread_ts = excluded.thread_ts, message_ts = excluded.message_ts",  # no REPLACE: keeps its feedback
            (r.answer_id, r.user_id, r.channel_id, r.thread_ts, r.message_ts, r.verdict, r.case_id, r.title,
             r.evidence, r.created),
        )]
        statements += [("INSERT OR REPLACE INTO feedback VALUES (?, ?, ?)", (r.answer_id, user, value))
                       for user, value in r.feedback.items()]
        return self._write(f"answer {r.answer_id}", statements)

    def save_feedback(self, answer_id: str, user_id: str, value: str) -> bool:
        return self._write(f"feedback on {answer_id}", [(
            "INSERT OR REPLACE INTO feedback SELECT ?, ?, ? WHERE EXISTS "
            "(SELECT 1 FROM answers WHERE answer_id = ?)", (answer_id, user_id, value, answer_id),
        )])

    def load_answer(self, answer_id: str) -> AnswerRecord | None:
        rows = self._read(f"answer {answer_id}", "SELECT * FROM answers WHERE answer_id = ? AND created >= ?",
                          (answer_id, self._clock() - self.retention_s))
        return self._with_feedback(rows)[0] if rows else None

    def answers_for_user(self, user_id: str, limit: int) -> list[AnswerRecord]:
        """The user's answers, newest first."""
        rows = self._read(f"answers of {user_id}",
                          "SELECT * FROM answers WHERE user_id = ? AND created >= ? ORDER BY created DESC LIMIT ?",
                          (user_id, self._clock() - self.retention_s, limit))
        return self._with_feedback(rows)

    def _with_feedback(self, rows: list[sqlite3.Row]) -> list[AnswerRecord]:
        ids = [row["answer_id"] for row in rows]
        votes: dict[str, dict[str, Any]] = {i: {} for i in ids}
        if ids:
            marks = ",".join("?" * len(ids))
            for vote in self._read("feedback", f"SELECT * FROM feedback WHERE answer_id IN ({marks})", tuple(ids)):
                votes[vote["answer_id"]][vote["user_id"]] = vote["value"]
        return [
            AnswerRecord(answer_id=row["answer_id"], user_id=row["user_id"], channel_id=row["channel_id"],
                         thread_ts=row["thread_ts"], message_ts=row["message_ts"], verdict=row["verdict"],
                         case_id=row["case_id"], title=row["title"], evidence=row["evidence"],
                         created=row["created"], feedback=votes[row["answer_id"]])
            for row in rows
        ]

    # --- host diagnoses per thread -------------------------------------------------------------------------
    def save_thread_facts(self, f: ThreadHostFacts) -> bool:
        return self._write(f"host facts of thread {f.channel_id}/{f.thread_ts}", [(
            "INSERT OR REPLACE INTO thread_hosts VALUES (?, ?, ?, ?, ?, ?)",
            (f.channel_id, f.thread_ts, f.target, json.dumps(list(f.hosts)), json.dumps(list(f.facts)), f.created),
        )])

    def load_thread_facts(self, channel_id: str, thread_ts: str) -> ThreadHostFacts | None:
        rows = self._read("thread host facts", "SELECT * FROM thread_hosts WHERE channel_id = ? AND thread_ts = ?",
                          (channel_id, thread_ts))
        if not rows:
            return None
        row = rows[0]
        try:
            hosts, facts = json.loads(row["hosts"]), json.loads(row["facts"])
        except ValueError:
            log.warning("unreadable host facts for thread %s/%s in %s", channel_id, thread_ts, self.path)
            return None
        return ThreadHostFacts(channel_id=row["channel_id"], thread_ts=row["thread_ts"], target=row["target"],
                               hosts=tuple(hosts), facts=tuple(facts), created=row["created"])
