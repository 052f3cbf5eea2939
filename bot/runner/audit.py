"""Audit log of host checks: who ran what on which hosts, when, and the verdicts; refusals too.

In bot/storage (its own SQLite file or the shared PostgreSQL server); every write is its own short
transaction, so concurrent runs from several threads, processes or replicas all get recorded. A run
whose process died leaves `running`; `close_stale()` (called by the fleet queue when it finds such a run's
jobs orphaned) ends it as `interrupted`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.storage import Migration, StorageError, open_database
from bot.storage.migrations import SchemaTooNew, migrate

MIGRATIONS = [
    Migration(1, "runs and results", """
CREATE TABLE IF NOT EXISTS runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at  REAL NOT NULL,
    finished_at REAL,
    user_id     TEXT,
    channel_id  TEXT,
    source      TEXT NOT NULL,          -- slack | cli
    target      TEXT NOT NULL,
    hosts       TEXT NOT NULL,          -- JSON list
    checks      TEXT NOT NULL,          -- JSON list of check ids
    max_tier    INTEGER NOT NULL,
    status      TEXT NOT NULL,          -- running | done | failed | refused
    detail      TEXT                    -- refusal reason or error
);
CREATE TABLE IF NOT EXISTS results (
    run_id   INTEGER NOT NULL REFERENCES runs(id),
    host     TEXT NOT NULL,
    check_id TEXT NOT NULL,             -- '' for a host-level error
    verdict  TEXT NOT NULL,
    message  TEXT,
    PRIMARY KEY (run_id, host, check_id)
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at)
"""),
]


class AuditLog:
    def __init__(self, target: Path | str):
        """`target`: an SQLite file path or a postgresql:// URL."""
        self.path = target if isinstance(target, str) and "://" in target else Path(target).expanduser()
        try:
            self.db = open_database(self.path, "audit log", "VLLM_DOCTOR_AUDIT_DB")
            migrate(self.db, "audit", MIGRATIONS)
        except SchemaTooNew:
            raise
        except (ConfigError, StorageError) as exc:
            raise ConfigError(f"audit log {self.path}: {exc}") from exc

    def _write(self, statements: list[tuple[str, Sequence[object]]]) -> int:
        """Runs the statements in one transaction; returns the id a RETURNING statement gave, else 0."""
        last = 0
        with self.db.write() as conn:
            for sql, params in statements:
                cur = conn.execute(sql, params)
                if "RETURNING" in sql:
                    row = cur.fetchone()
                    last = int(row[0]) if row is not None else last
        return last

    def start(self, *, user_id: str | None, channel_id: str | None, source: str, target: str,
              hosts: list[str], checks: list[str], max_tier: int) -> int:
        return self._write([(
            "INSERT INTO runs (started_at, user_id, channel_id, source, target, hosts, checks, max_tier, status)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running') RETURNING id",
            (time.time(), user_id, channel_id, source, target, json.dumps(hosts), json.dumps(checks), max_tier),
        )])

    def finish(self, run_id: int, report: Any = None, *, error: str | None = None,
               status: str | None = None) -> None:
        """Close a run: `done`, `failed` (with `error`) or an explicit status such as `interrupted`."""
        final = status or ("failed" if error else "done")
        statements: list[tuple[str, Sequence[object]]] = [(
            "UPDATE runs SET finished_at = ?, status = ?, detail = ? WHERE id = ?",
            (time.time(), final, error, run_id),
        )]
        for host in getattr(report, "hosts", []) or []:
            if host.error:
                statements.append((_UPSERT_RESULT, (run_id, host.host, "", "error", host.error)))
            for check in host.checks:
                statements.append((_UPSERT_RESULT, (run_id, host.host, check.id, check.verdict, check.message)))
        self._write(statements)

    def record_host(self, run_id: int, host: Any) -> None:
        """One host's results of a run that is still going (fleet runs spread over replicas)."""
        statements: list[tuple[str, Sequence[object]]] = []
        if host.error:
            statements.append((_UPSERT_RESULT, (run_id, host.host, "", "error", host.error)))
        for check in host.checks:
            statements.append((_UPSERT_RESULT, (run_id, host.host, check.id, check.verdict, check.message)))
        if statements:
            self._write(statements)

    def record_refusal(self, user_id: str | None, channel_id: str | None, target: str, reason: str,
                       source: str = "slack") -> int:
        now = time.time()
        return self._write([(
            "INSERT INTO runs (started_at, finished_at, user_id, channel_id, source, target, hosts, checks,"
            " max_tier, status, detail) VALUES (?, ?, ?, ?, ?, ?, '[]', '[]', 0, 'refused', ?) RETURNING id",
            (now, now, user_id, channel_id, source, target[:200], reason),
        )])

    def close_interrupted(self, source: str, started_before: float, *, keep: Sequence[int] = ()) -> int:
        """Runs of `source` still `running` that no live process will finish (the bot that ran them
        stopped): closed as `interrupted`. `keep`: ids some live process is still working on."""
        marks = ",".join("?" * len(keep)) or "NULL"
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = 'interrupted', finished_at = ?, detail = ? WHERE status = 'running' "
                f"AND source = ? AND started_at < ? AND id NOT IN ({marks})",
                (time.time(), "the bot stopped before this run finished", source, started_before, *keep),
            )
            return cur.rowcount

    def runs(self, limit: int = 100) -> list[dict[str, Any]]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
            out = []
            for row in rows:
                item = {k: row[k] for k in row.keys()}
                item["hosts"], item["checks"] = json.loads(item["hosts"]), json.loads(item["checks"])
                item["results"] = [
                    {k: r[k] for k in r.keys()} for r in conn.execute(
                        "SELECT host, check_id, verdict, message FROM results WHERE run_id = ? "
                        "ORDER BY host, check_id", (row["id"],)).fetchall()
                ]
                out.append(item)
            return out


_UPSERT_RESULT = ("INSERT INTO results (run_id, host, check_id, verdict, message) VALUES (?, ?, ?, ?, ?) "
                  "ON CONFLICT (run_id, host, check_id) DO UPDATE SET verdict = excluded.verdict, "
                  "message = excluded.message")
