"""Audit log of host checks: who ran what on which hosts, when, and the verdicts; refusals too.

SQLite in WAL mode; every write is its own short transaction on its own connection (with a busy
timeout), so concurrent runs from several threads or processes all get recorded.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bot.errors import ConfigError

_SCHEMA = """
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
    status      TEXT NOT NULL,          -- running | done | failed | interrupted | refused
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
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
"""


class AuditLog:
    def __init__(self, path: Path | str):
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self._connect()) as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"audit log {self.path}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 30000")
        return db

    def _write(self, sql_and_params: list[tuple[str, tuple]]) -> int:
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                last = 0
                for sql, params in sql_and_params:
                    last = db.execute(sql, params).lastrowid or last
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return last

    def start(self, *, user_id: str | None, channel_id: str | None, source: str, target: str,
              hosts: list[str], checks: list[str], max_tier: int) -> int:
        return self._write([(
            "INSERT INTO runs (started_at, user_id, channel_id, source, target, hosts, checks, max_tier, status)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running')",
            (time.time(), user_id, channel_id, source, target, json.dumps(hosts), json.dumps(checks), max_tier),
        )])

    def finish(self, run_id: int, report=None, *, error: str | None = None, interrupted: bool = False) -> None:
        status = "interrupted" if interrupted else "failed" if error else "done"
        statements: list[tuple[str, tuple]] = [(
            "UPDATE runs SET finished_at = ?, status = ?, detail = ? WHERE id = ?",
            (time.time(), status, error, run_id),
        )]
        for host in getattr(report, "hosts", []) or []:
            if host.error:
                statements.append(("INSERT OR REPLACE INTO results VALUES (?, ?, '', 'error', ?)",
                                   (run_id, host.host, host.error)))
            for check in host.checks:
                statements.append(("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                                   (run_id, host.host, check.id, check.verdict, check.message)))
        self._write(statements)

    def record_refusal(self, user_id: str | None, channel_id: str | None, target: str, reason: str,
                       source: str = "slack") -> int:
        now = time.time()
        return self._write([(
            "INSERT INTO runs (started_at, finished_at, user_id, channel_id, source, target, hosts, checks,"
            " max_tier, status, detail) VALUES (?, ?, ?, ?, ?, ?, '[]', '[]', 0, 'refused', ?)",
            (now, now, user_id, channel_id, source, target[:200], reason),
        )])

    def runs(self, limit: int = 100) -> list[dict[str, Any]]:
        with closing(self._connect()) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
            out = []
            for row in rows:
                item = dict(row)
                item["hosts"], item["checks"] = json.loads(item["hosts"]), json.loads(item["checks"])
                item["results"] = [dict(r) for r in db.execute(
                    "SELECT host, check_id, verdict, message FROM results WHERE run_id = ?", (row["id"],))]
                out.append(item)
            return out
