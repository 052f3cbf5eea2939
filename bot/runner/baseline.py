"""Known-good facts of a host group (`vllm-doctor diagnose GROUP --save-baseline`), in bot/storage.

A later run of the same target is compared with the newest baseline (bot/runner/fleet_diff.py:
baseline_drift): "gpu07: driver changed since the baseline: 550.54.15 → 535.104.05" is shown first.
One row per save; the newest wins, older ones stay as history. Facts hold versions, GPU model/count,
/dev/shm and a few environment variables (already redacted by the runner), never command output.
Lives beside the audit log: its SQLite file, or the shared PostgreSQL database of the replicas.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from bot.errors import ConfigError
from bot.storage import Migration, StorageError, open_database
from bot.storage.migrations import SchemaTooNew, migrate

MIGRATIONS = [
    Migration(1, "baselines", """
CREATE TABLE IF NOT EXISTS baselines (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    target    TEXT NOT NULL,
    saved_at  REAL NOT NULL,
    saved_by  TEXT,
    facts     TEXT NOT NULL            -- JSON: host -> field -> value
);
CREATE INDEX IF NOT EXISTS baselines_target ON baselines(target, saved_at)
"""),
]


@dataclass(frozen=True)
class Baseline:
    target: str
    saved_at: float
    saved_by: str | None
    facts: dict[str, dict[str, str]]


class BaselineStore:
    def __init__(self, target: Path | str):
        """`target`: an SQLite file path or a postgresql:// URL (settings.store_target(runner_audit_db))."""
        self.path = target if isinstance(target, str) and "://" in target else Path(target).expanduser()
        try:
            self.db = open_database(self.path, "audit log", "VLLM_DOCTOR_AUDIT_DB")
            migrate(self.db, "baselines", MIGRATIONS)
        except SchemaTooNew:
            raise
        except (ConfigError, StorageError) as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc

    def save(self, target: str, facts: dict[str, dict[str, str]], saved_by: str | None = None,
             now: float | None = None) -> Baseline:
        baseline = Baseline(target, time.time() if now is None else now, saved_by, facts)
        try:
            with self.db.write() as conn:
                conn.execute("INSERT INTO baselines (target, saved_at, saved_by, facts) VALUES (?, ?, ?, ?)",
                             (target, baseline.saved_at, saved_by, json.dumps(facts, sort_keys=True)))
        except StorageError as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc
        return baseline

    def latest(self, target: str) -> Baseline | None:
        try:
            with self.db.read() as conn:
                row = conn.execute("SELECT target, saved_at, saved_by, facts FROM baselines WHERE target = ? "
                                   "ORDER BY saved_at DESC, id DESC LIMIT 1", (target,)).fetchone()
        except StorageError as exc:
            raise ConfigError(f"baseline store {self.path}: {exc}") from exc
        if row is None:
            return None
        try:
            facts = json.loads(row[3])
        except ValueError:
            return None  # a damaged row is no baseline; the next save replaces it
        return Baseline(str(row[0]), float(row[1]), row[2], facts if isinstance(facts, dict) else {})
