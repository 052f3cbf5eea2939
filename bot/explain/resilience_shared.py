"""The circuit breaker and the answer cache of bot/explain/resilience.py, kept in the shared database
(VLLM_DOCTOR_DATABASE_URL) so every replica sees the same LLM state: a dead LLM is noticed once (N
failures across all replicas open the circuit for everyone, one replica makes the half-open trial) and
an explanation computed by one replica is reused by the others.

Same interfaces as CircuitBreaker / AnswerCache; wall-clock time, since replicas share no monotonic
clock. A database error never costs an answer: the breaker then allows the call, the cache misses.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

from bot.models import Explanation
from bot.storage import Database, Migration, StorageError, one
from bot.storage.migrations import migrate

log = logging.getLogger(__name__)

MIGRATIONS = [
    Migration(1, "LLM breaker and answer cache", """
CREATE TABLE IF NOT EXISTS llm_breaker (
    name        TEXT PRIMARY KEY,
    failures    INTEGER NOT NULL DEFAULT 0,
    opened_at   REAL,
    trial_until REAL,
    last_reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS llm_answers (
    model       TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    answer      TEXT NOT NULL,
    created     REAL NOT NULL,
    PRIMARY KEY (model, prompt_hash)
);
CREATE INDEX IF NOT EXISTS llm_answers_by_age ON llm_answers (created)
"""),
]

State = Literal["closed", "open", "half-open"]


class SharedCircuitBreaker:
    def __init__(self, db: Database, failures: int = 3, cooldown_s: float = 30.0, name: str = "llm",
                 clock: Callable[[], float] = time.time) -> None:
        self.db, self.threshold, self.cooldown_s, self.name = db, failures, cooldown_s, name
        self._clock = clock
        migrate(db, "llm", MIGRATIONS)
        with db.write() as conn:
            conn.execute("INSERT INTO llm_breaker (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (name,))

    def _row(self) -> tuple[int, float | None, str]:
        with self.db.read() as conn:
            row = conn.execute("SELECT failures, opened_at, last_reason FROM llm_breaker WHERE name = ?",
                               (self.name,)).fetchone()
        return (int(row[0]), row[1], str(row[2])) if row is not None else (0, None, "")

    @property
    def last_reason(self) -> str:
        try:
            return self._row()[2]
        except StorageError:
            return ""

    @property
    def state(self) -> State:
        try:
            _, opened_at, _ = self._row()
        except StorageError:
            return "closed"
        if opened_at is None:
            return "closed"
        return "half-open" if self._clock() - opened_at >= self.cooldown_s else "open"

    def allow(self) -> bool:
        now = self._clock()
        try:
            if self._row()[1] is None:
                return True  # closed: the common case costs one read, no write
            with self.db.write() as conn:
                # closed, or half-open with no trial running anywhere (a trial whose replica died expires)
                cur = conn.execute(
                    "UPDATE llm_breaker SET trial_until = CASE WHEN opened_at IS NULL THEN trial_until ELSE ? END "
                    "WHERE name = ? AND (opened_at IS NULL OR (opened_at <= ? AND "
                    "(trial_until IS NULL OR trial_until < ?)))",
                    (now + self.cooldown_s, self.name, now - self.cooldown_s, now),
                )
                return cur.rowcount == 1
        except StorageError as exc:
            log.warning("LLM breaker state unavailable (calling the LLM anyway): %s", exc)
            return True

    def retry_in_s(self) -> float:
        try:
            _, opened_at, _ = self._row()
        except StorageError:
            return 0.0
        return 0.0 if opened_at is None else max(0.0, self.cooldown_s - (self._clock() - opened_at))

    def success(self) -> None:
        self._update("failures = 0, opened_at = NULL, trial_until = NULL", ())

    def failure(self, reason: str) -> None:
        self._update(
            "failures = failures + 1, last_reason = ?, trial_until = NULL, opened_at = CASE "
            "WHEN trial_until IS NOT NULL OR failures + 1 >= ? THEN ? ELSE opened_at END",
            (reason[:500], self.threshold, self._clock()),
        )

    def release(self) -> None:
        self._update("trial_until = NULL", ())

    def _update(self, sets: str, params: tuple[object, ...]) -> None:
        try:
            with self.db.write() as conn:
                conn.execute(f"UPDATE llm_breaker SET {sets} WHERE name = ?", (*params, self.name))
        except StorageError as exc:
            log.warning("could not record the LLM breaker state: %s", exc)


class SharedAnswerCache:
    """LLM explanations keyed by (model, prompt hash), the newest `size` kept."""

    PRUNE_EVERY = 50

    def __init__(self, db: Database, size: int = 256, clock: Callable[[], float] = time.time) -> None:
        self.db, self.size, self._clock = db, size, clock
        self.hits = 0
        self.misses = 0
        self._puts = 0
        self._lock = threading.Lock()
        migrate(db, "llm", MIGRATIONS)

    def get(self, key: tuple[str, str]) -> Explanation | None:
        if self.size <= 0:
            return None
        try:
            with self.db.read() as conn:
                row = conn.execute("SELECT answer FROM llm_answers WHERE model = ? AND prompt_hash = ?", key).fetchone()
            found = Explanation(**json.loads(row[0])) if row is not None else None
        except (StorageError, ValueError, TypeError) as exc:
            log.warning("answer cache unavailable: %s", exc)
            found = None
        with self._lock:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, key: tuple[str, str], value: Explanation) -> None:
        if self.size <= 0:
            return
        answer = json.dumps({k: v for k, v in value.to_json().items() if k != "timings"})
        try:
            with self.db.write() as conn:
                conn.execute(
                    "INSERT INTO llm_answers (model, prompt_hash, answer, created) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (model, prompt_hash) DO UPDATE SET answer = excluded.answer, "
                    "created = excluded.created",
                    (*key, answer, self._clock()),
                )
            with self._lock:
                self._puts += 1
                due = self._puts % self.PRUNE_EVERY == 0
            if due:
                with self.db.write() as conn:
                    conn.execute("DELETE FROM llm_answers WHERE created < (SELECT created FROM llm_answers "
                                 "ORDER BY created DESC LIMIT 1 OFFSET ?)", (self.size - 1,))
        except StorageError as exc:
            log.warning("could not cache an explanation: %s", exc)

    def __len__(self) -> int:
        try:
            with self.db.read() as conn:
                return int(one(conn.execute("SELECT COUNT(*) FROM llm_answers"))[0])
        except StorageError:
            return 0
