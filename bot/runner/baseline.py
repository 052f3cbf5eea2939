"""Known-good facts of a host group (`vllm-doctor diagnose GROUP --save-baseline`), kept beside the audit log.

A later run of the same target is compared with the newest baseline (bot/runner/fleet_diff.py:baseline_drift):
"gpu07: driver changed since the baseline: 550.54.15 → 535.104.05" is shown before anything else.
One row per save; the newest wins, older ones stay as history. Facts hold versions, GPU model/count,
/dev/shm and a few environment variables (already redacted by the runner), never command output.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from bot.errors import ConfigError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS baselines (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    target    TEXT NOT NULL,
    saved_at  REAL NOT NULL,
    saved_by  TEXT,
    facts     TEXT NOT NULL            -- JSON: host -> field -> value
);
CREATE INDEX IF NOT EXISTS baselines_target ON baselines(target, saved_at);
"""


@dataclass(frozen=True)
class Baseline:
    target: str
    saved_at: float
    saved_by: str | None
    facts: dict[str, dict[str, str]]


class BaselineStore:
    def __init__(self, path: Path | str):
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self._connect()) as db:
                db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 30000")
        return db

    def save(self, target: str, facts: dict[str, dict[str, str]], saved_by: str | None = None,
             now: float | None = None) -> Baseline:
        baseline = Baseline(target, time.time() if now is None else now, saved_by, facts)
        try:
            with closing(self._connect()) as db:
                db.execute("INSERT INTO baselines (target, saved_at, saved_by, facts) VALUES (?, ?, ?, ?)",
                           (target, baseline.saved_at, saved_by, json.dumps(facts, sort_keys=True)))
        except sqlite3.Error as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc
        return baseline

    def latest(self, target: str) -> Baseline | None:
        try:
            with closing(self._connect()) as db:
                row = db.execute("SELECT target, saved_at, saved_by, facts FROM baselines WHERE target = ? "
                                 "ORDER BY saved_at DESC, id DESC LIMIT 1", (target,)).fetchone()
        except sqlite3.Error as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc
        if row is None:
            return None
        try:
            facts = json.loads(row[3])
        except ValueError:
            return None  # a damaged row is no baseline; the next save replaces it
        return Baseline(row[0], row[1], row[2], facts if isinstance(facts, dict) else {})
