"""What the Slack bot must remember across restarts and share between replicas (bot/storage: an SQLite
file, VLLM_DOCTOR_SLACK_STATE_DB, or the PostgreSQL server of VLLM_DOCTOR_DATABASE_URL):

    answers        the minimum the buttons on an answer need (case, verdict, evidence, where it lives)
    feedback       who pressed "Fixed it" / "Didn't help" on which answer (shown on the Home tab)
    thread_hosts   the last host diagnosis of each thread, whose facts later explanations there use
    claims         Slack deliveries (event ids, slash-command triggers): which replica works on each, under a
                   lease (`expires`, renewed by a heartbeat), and whether it was answered (`state`)

One short transaction per write, so worker threads and other replicas never step on each other. Rows
older than the retention (and beyond MAX_ROWS per table) are pruned at start and every PRUNE_EVERY
writes. A failing write or read is logged and treated as "not remembered": bookkeeping never costs
anyone an answer. Claims are the exception: `take` raises StorageError, and bot/slack/seen_events.py
decides what a delivery does while the database is unreachable (answer it once from this replica's view).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bot.errors import ConfigError
from bot.slack.healthy_runs import HealthyRun
from bot.slack.recent import AnswerRecord, Feedback
from bot.slack.thread_facts import ThreadHostFacts
from bot.storage import Migration, Row, StorageError, open_database
from bot.storage.migrations import SchemaTooNew, migrate

log = logging.getLogger(__name__)

MAX_ROWS = 50_000  # per table; with the age limit, keeps the file at a few tens of MB at most
PRUNE_EVERY = 200
CLAIM_TTL_S = 24 * 3600.0  # Slack retries within minutes; a day is plenty

MIGRATIONS = [
    Migration(1, "answers, feedback, thread hosts", """
CREATE TABLE IF NOT EXISTS answers (
    answer_id  TEXT PRIMARY KEY,
    user_id    TEXT,
    channel_id TEXT NOT NULL,
    thread_ts  TEXT,
    message_ts TEXT,
    verdict    TEXT NOT NULL,
    case_id    TEXT,
    title      TEXT,
    evidence   TEXT NOT NULL,
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
    hosts      TEXT NOT NULL,
    facts      TEXT NOT NULL,
    created    REAL NOT NULL,
    PRIMARY KEY (channel_id, thread_ts)
);
CREATE INDEX IF NOT EXISTS thread_hosts_by_age ON thread_hosts (created)
"""),
    Migration(2, "claims: exactly-once Slack deliveries across replicas", """
CREATE TABLE IF NOT EXISTS claims (
    claim_key TEXT PRIMARY KEY,
    owner     TEXT NOT NULL,
    created   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_by_age ON claims (created)
"""),
    Migration(3, "thread hosts: the versions the checks found (bot/diagnosis/versions.py)", """
ALTER TABLE thread_hosts ADD COLUMN versions TEXT NOT NULL DEFAULT '{}'
"""),
    Migration(4, "claims are leases: expiry, state, attempts, the placeholder the answer goes into", """
ALTER TABLE claims ADD COLUMN state TEXT NOT NULL DEFAULT 'done';
ALTER TABLE claims ADD COLUMN expires REAL NOT NULL DEFAULT 0;
ALTER TABLE claims ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE claims ADD COLUMN channel TEXT;
ALTER TABLE claims ADD COLUMN message_ts TEXT
"""),
    Migration(5, "thread hosts: the GPUs the one checked host counted ({tp_fit} in fix commands)", """
ALTER TABLE thread_hosts ADD COLUMN gpus INTEGER
"""),
    Migration(6, "healthy start-up logs per channel and model (what changed since a working run)", """
CREATE TABLE IF NOT EXISTS healthy_runs (
    channel_id TEXT NOT NULL,
    model TEXT NOT NULL,
    lines TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (channel_id, model)
)
"""),
]

ClaimOutcome = Literal["new", "retaken", "done", "busy"]
CLAIM_TIMEOUT_S = 1.0  # a claim is on the ack path (Slack wants the ack within 3 s)


@dataclass(frozen=True)
class Lease:
    """What `take` found: `new` (first delivery), `retaken` (the last holder's lease ran out or was handed
    back: its placeholder, if it posted one, is where the answer goes), `done` (answered already), `busy`
    (another replica holds a live lease)."""

    outcome: ClaimOutcome
    attempts: int = 1
    channel: str | None = None
    message_ts: str | None = None

Statements = list[tuple[str, Sequence[object]]]
_UPSERT_FEEDBACK = ("INSERT INTO feedback (answer_id, user_id, value) {source} "
                    "ON CONFLICT (answer_id, user_id) DO UPDATE SET value = excluded.value")


class SlackStateDB:
    def __init__(self, target: Path | str, retention_s: float, clock: Callable[[], float] = time.time) -> None:
        """`target`: an SQLite file path or a postgresql:// URL."""
        self.retention_s = retention_s
        self._clock = clock
        self._writes = 0
        self._count_lock = threading.Lock()
        try:
            self.db = open_database(target if isinstance(target, str) and "://" in target else Path(target),
                                    "Slack state file", "VLLM_DOCTOR_SLACK_STATE_DB")
            migrate(self.db, "slack", MIGRATIONS)
        except SchemaTooNew:
            raise
        except (ConfigError, StorageError) as exc:
            raise ConfigError(f"Slack state {target}: {exc} (setting VLLM_DOCTOR_SLACK_STATE_DB)") from exc
        self.path = self.db.label
        self.prune()

    def _write(self, what: str, statements: Statements) -> bool:
        try:
            with self.db.write() as conn:
                for sql, params in statements:
                    conn.execute(sql, params)
        except StorageError as exc:
            log.warning("could not remember %s in %s: %s", what, self.path, exc)
            return False
        with self._count_lock:
            self._writes += 1
            due = self._writes % PRUNE_EVERY == 0
        if due:
            self.prune()
        return True

    def _read(self, what: str, sql: str, params: Sequence[object]) -> list[Row]:
        try:
            with self.db.read() as conn:
                return conn.execute(sql, params).fetchall()
        except StorageError as exc:
            log.warning("could not read %s from %s: %s", what, self.path, exc)
            return []

    def prune(self) -> None:
        now = self._clock()
        cutoff = now - self.retention_s
        statements: Statements = []
        for table in ("answers", "thread_hosts", "healthy_runs"):
            statements.append((f"DELETE FROM {table} WHERE created < ?", (cutoff,)))
            statements.append((
                f"DELETE FROM {table} WHERE created < (SELECT created FROM {table} ORDER BY created DESC "
                "LIMIT 1 OFFSET ?)", (MAX_ROWS - 1,),
            ))
        statements.append(("DELETE FROM claims WHERE created < ?", (now - CLAIM_TTL_S,)))
        try:
            with self.db.write() as conn:
                for sql, params in statements:
                    conn.execute(sql, params)
        except StorageError as exc:
            log.warning("could not prune %s: %s", self.path, exc)

    # --- deliveries: leases --------------------------------------------------------------------------------
    def take(self, key: str, owner: str, lease_s: float, timeout: float = CLAIM_TIMEOUT_S) -> Lease:
        """Claim a delivery for `lease_s` seconds: exactly one caller per key gets it while its lease runs
        (one statement: the unique key and the conditional upsert decide, no read-then-write race); an
        unfinished claim whose lease ran out is taken over. Raises StorageError."""
        now = self._clock()
        with self.db.write(timeout=timeout) as conn:
            row = conn.execute(
                "INSERT INTO claims (claim_key, owner, created, state, expires, attempts) "
                "VALUES (?, ?, ?, 'working', ?, 1) ON CONFLICT (claim_key) DO UPDATE SET owner = excluded.owner, "
                "expires = excluded.expires, attempts = claims.attempts + 1 "
                "WHERE claims.state = 'working' AND claims.expires <= ? "
                "RETURNING attempts, channel, message_ts",
                (key, owner, now, now + lease_s, now),
            ).fetchone()
            if row is None:
                held = conn.execute("SELECT state, owner FROM claims WHERE claim_key = ?", (key,)).fetchone()
        if row is not None:
            attempts = int(row["attempts"])
            return Lease("new" if attempts == 1 else "retaken", attempts, row["channel"], row["message_ts"])
        if held is None or held["state"] == "done" or held["owner"] == owner:
            return Lease("done")
        return Lease("busy")

    def renew(self, keys: Sequence[str], owner: str, lease_s: float) -> int:
        """Extend this replica's leases (the heartbeat); returns how many it still held. Raises StorageError."""
        if not keys:
            return 0
        marks = ",".join("?" * len(keys))
        with self.db.write(timeout=CLAIM_TIMEOUT_S) as conn:
            cur = conn.execute(f"UPDATE claims SET expires = ? WHERE owner = ? AND state = 'working' "
                               f"AND claim_key IN ({marks})", (self._clock() + lease_s, owner, *keys))
            return int(cur.rowcount)

    def finish(self, key: str, owner: str) -> bool:
        """The delivery was answered: no replica takes it again. Raises StorageError."""
        with self.db.write(timeout=CLAIM_TIMEOUT_S) as conn:
            cur = conn.execute("UPDATE claims SET state = 'done' WHERE claim_key = ? AND owner = ?", (key, owner))
            return cur.rowcount == 1

    def release(self, key: str, owner: str) -> bool:
        """Hand an unfinished delivery back (shutdown): the next delivery of it is taken at once. Raises
        StorageError."""
        with self.db.write(timeout=CLAIM_TIMEOUT_S) as conn:
            cur = conn.execute("UPDATE claims SET expires = 0 WHERE claim_key = ? AND owner = ? AND state = 'working'",
                               (key, owner))
            return cur.rowcount == 1

    def note_placeholder(self, key: str, owner: str, channel: str, message_ts: str) -> bool:
        """Where this delivery's answer is being written: a replica that takes it over edits that message."""
        return self._write(f"placeholder of {key}", [(
            "UPDATE claims SET channel = ?, message_ts = ? WHERE claim_key = ? AND owner = ?",
            (channel, message_ts, key, owner),
        )])

    def claim(self, key: str, owner: str, lease_s: float = 3600.0) -> bool:
        """True when this caller got the delivery (new or taken over). A database error answers True."""
        try:
            return self.take(key, owner, lease_s).outcome in ("new", "retaken")
        except StorageError as exc:
            log.warning("could not claim %s in %s (answering anyway): %s", key, self.path, exc)
            return True

    # --- answers ------------------------------------------------------------------------------------------
    def save_answer(self, r: AnswerRecord) -> bool:
        statements: Statements = [(
            "INSERT INTO answers (answer_id, user_id, channel_id, thread_ts, message_ts, verdict, case_id, title, "
            "evidence, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (answer_id) DO UPDATE SET "
            "thread_ts = excluded.thread_ts, message_ts = excluded.message_ts",  # no REPLACE: keeps its feedback
            (r.answer_id, r.user_id, r.channel_id, r.thread_ts, r.message_ts, r.verdict, r.case_id, r.title,
             r.evidence, r.created),
        )]
        statements += [(_UPSERT_FEEDBACK.format(source="VALUES (?, ?, ?)"), (r.answer_id, user, value))
                       for user, value in r.feedback.items()]
        return self._write(f"answer {r.answer_id}", statements)

    def save_feedback(self, answer_id: str, user_id: str, value: str) -> bool:
        return self._write(f"feedback on {answer_id}", [(
            _UPSERT_FEEDBACK.format(source="SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM answers WHERE answer_id = ?)"),
            (answer_id, user_id, value, answer_id),
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

    def _with_feedback(self, rows: list[Row]) -> list[AnswerRecord]:
        ids = [str(row["answer_id"]) for row in rows]
        votes: dict[str, dict[str, Feedback]] = {i: {} for i in ids}
        if ids:
            marks = ",".join("?" * len(ids))
            for vote in self._read("feedback", f"SELECT * FROM feedback WHERE answer_id IN ({marks})", tuple(ids)):
                votes[str(vote["answer_id"])][str(vote["user_id"])] = vote["value"]  # CHECK-constrained
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
            "INSERT INTO thread_hosts (channel_id, thread_ts, target, hosts, facts, created, versions, gpus) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (channel_id, thread_ts) DO UPDATE SET target = excluded.target, hosts = excluded.hosts, "
            "facts = excluded.facts, created = excluded.created, versions = excluded.versions, gpus = excluded.gpus",
            (f.channel_id, f.thread_ts, f.target, json.dumps(list(f.hosts)), json.dumps(list(f.facts)), f.created,
             json.dumps(dict(f.versions)), f.gpus),
        )])

    def save_healthy_run(self, run: HealthyRun) -> bool:
        return self._write(f"healthy run of {run.model} in {run.channel_id}", [(
            "INSERT INTO healthy_runs (channel_id, model, lines, created) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (channel_id, model) DO UPDATE SET lines = excluded.lines, created = excluded.created",
            (run.channel_id, run.model, json.dumps([list(pair) for pair in run.lines]), run.created),
        )])

    def load_healthy_run(self, channel_id: str, model: str) -> HealthyRun | None:
        rows = self._read("healthy run", "SELECT * FROM healthy_runs WHERE channel_id = ? AND model = ?",
                          (channel_id, model))
        if not rows:
            return None
        try:
            lines = tuple((int(n), str(text)) for n, text in json.loads(rows[0]["lines"]))
        except (ValueError, TypeError):
            log.warning("unreadable healthy run of %s in %s (%s)", model, channel_id, self.path)
            return None
        return HealthyRun(rows[0]["channel_id"], rows[0]["model"], lines, rows[0]["created"])

    def load_thread_facts(self, channel_id: str, thread_ts: str) -> ThreadHostFacts | None:
        rows = self._read("thread host facts", "SELECT * FROM thread_hosts WHERE channel_id = ? AND thread_ts = ?",
                          (channel_id, thread_ts))
        if not rows:
            return None
        row = rows[0]
        try:
            hosts, facts, versions = json.loads(row["hosts"]), json.loads(row["facts"]), json.loads(row["versions"])
        except ValueError:
            log.warning("unreadable host facts for thread %s/%s in %s", channel_id, thread_ts, self.path)
            return None
        return ThreadHostFacts(channel_id=row["channel_id"], thread_ts=row["thread_ts"], target=row["target"],
                               hosts=tuple(hosts), facts=tuple(facts), created=row["created"],
                               versions={str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {},
                               gpus=row["gpus"] if isinstance(row["gpus"], int) else None)
