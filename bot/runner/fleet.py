"""The fleet queue: a group diagnosis as one job per host in the shared database, worked by every
replica (issue 11). PostgreSQL claims with SELECT … FOR UPDATE SKIP LOCKED; SQLite (one process, or
tests) serialises claims with its write lock, which gives the same answers more slowly.

    run_id = queue.enqueue(spec, hosts)                 the asking replica, after posting its placeholder
    jobs = queue.claim(owner, limit, lease_s)           any replica: queued hosts, or hosts whose lease ran out
    queue.renew(owner, job_ids, lease_s)                while the checks run
    queue.complete(job_id, owner, host_report)          only the current lease holder's result counts
    run = queue.take_summary(run_id, owner)             exactly one replica gets it, when the last host is in

Guarantees: every host ends with exactly one stored result (a replica that lost its lease, e.g. killed
or stalled past the lease, has its late result discarded); a host is tried at most MAX_ATTEMPTS times,
then recorded as an error; the summary is handed out once. The audit row of the run is closed by the
summary's owner (`done`), or as `interrupted` by `close_abandoned()` when a summary owner vanished.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.runner.report import CheckResult, HostReport
from bot.storage import Database, Migration, one
from bot.storage.migrations import migrate

MAX_ATTEMPTS = 3
SUMMARY_LEASE_S = 120.0

MIGRATIONS = [
    Migration(1, "fleet runs and host jobs", """
CREATE TABLE IF NOT EXISTS fleet_runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    audit_run_id  INTEGER,
    target        TEXT NOT NULL,
    spec          TEXT NOT NULL,
    hosts_total   INTEGER NOT NULL,
    status        TEXT NOT NULL,
    summary_owner TEXT,
    summary_until REAL,
    created       REAL NOT NULL,
    finished      REAL
);
CREATE TABLE IF NOT EXISTS fleet_jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      INTEGER NOT NULL REFERENCES fleet_runs(id) ON DELETE CASCADE,
    host        TEXT NOT NULL,
    position    INTEGER NOT NULL,
    status      TEXT NOT NULL,
    owner       TEXT,
    lease_until REAL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    result      TEXT,
    finished    REAL,
    UNIQUE (run_id, host)
);
CREATE INDEX IF NOT EXISTS fleet_jobs_open ON fleet_jobs (status, lease_until);
CREATE INDEX IF NOT EXISTS fleet_runs_open ON fleet_runs (status)
"""),
]


@dataclass(frozen=True)
class Job:
    id: int
    run_id: int
    host: str
    attempts: int
    spec: dict[str, Any]


@dataclass
class FleetRun:
    id: int
    audit_run_id: int | None
    target: str
    spec: dict[str, Any]
    created: float
    hosts: list[HostReport] = field(default_factory=list)  # in the order they were asked for


def host_report_to_json(report: HostReport) -> str:
    return json.dumps(asdict(report), default=str)


def host_report_from_json(text: str) -> HostReport:
    data = json.loads(text)
    checks = [CheckResult(**c) for c in data.pop("checks", [])]
    return HostReport(**data, checks=checks)


class FleetQueue:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self._clock = clock
        migrate(db, "fleet", MIGRATIONS)

    def enqueue(self, spec: dict[str, Any], hosts: Sequence[str], *, target: str,
                audit_run_id: int | None = None) -> int:
        """One run, one queued job per host; `spec` is what workers and the summary need (JSON)."""
        now = self._clock()
        with self.db.write() as conn:
            row = one(conn.execute(
                "INSERT INTO fleet_runs (audit_run_id, target, spec, hosts_total, status, created) "
                "VALUES (?, ?, ?, ?, 'running', ?) RETURNING id",
                (audit_run_id, target, json.dumps(spec), len(hosts), now),
            ))
            run_id = int(row[0])
            conn.executemany(
                "INSERT INTO fleet_jobs (run_id, host, position, status) VALUES (?, ?, ?, 'queued')",
                [(run_id, host, i) for i, host in enumerate(hosts)],
            )
        return run_id

    def claim(self, owner: str, limit: int, lease_s: float) -> list[Job]:
        """Up to `limit` jobs for `owner`: queued ones first, then those whose lease expired (their replica
        died or stalled). A job past MAX_ATTEMPTS is finished as an error instead of handed out again."""
        now = self._clock()
        skip_locked = " FOR UPDATE SKIP LOCKED" if self.db.backend == "postgresql" else ""
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT id, run_id, host, attempts FROM fleet_jobs WHERE status = 'queued' "
                "OR (status = 'running' AND lease_until < ?) ORDER BY id LIMIT ?" + skip_locked,
                (now, limit),
            ).fetchall()
            jobs: list[Job] = []
            specs: dict[int, dict[str, Any]] = {}
            for row in rows:
                job_id, run_id, host, attempts = int(row[0]), int(row[1]), str(row[2]), int(row[3])
                if attempts >= MAX_ATTEMPTS:
                    lost = HostReport(host=host, error=f"not checked: {attempts} replicas lost this host mid-run",
                                      error_kind="RunnerError")
                    conn.execute("UPDATE fleet_jobs SET status = 'done', owner = NULL, result = ?, finished = ? "
                                 "WHERE id = ?", (host_report_to_json(lost), now, job_id))
                    continue
                conn.execute("UPDATE fleet_jobs SET status = 'running', owner = ?, lease_until = ?, "
                             "attempts = attempts + 1 WHERE id = ?", (owner, now + lease_s, job_id))
                if run_id not in specs:
                    spec_row = conn.execute("SELECT spec FROM fleet_runs WHERE id = ?", (run_id,)).fetchone()
                    specs[run_id] = json.loads(spec_row[0]) if spec_row is not None else {}
                jobs.append(Job(job_id, run_id, host, attempts + 1, specs[run_id]))
        return jobs

    def renew(self, owner: str, job_ids: Sequence[int], lease_s: float) -> int:
        """Extend the leases this owner still holds; returns how many it still holds."""
        if not job_ids:
            return 0
        marks = ",".join("?" * len(job_ids))
        with self.db.write() as conn:
            cur = conn.execute(
                f"UPDATE fleet_jobs SET lease_until = ? WHERE owner = ? AND status = 'running' AND id IN ({marks})",
                (self._clock() + lease_s, owner, *job_ids),
            )
            return cur.rowcount

    def release(self, owner: str, job_ids: Sequence[int]) -> int:
        """Hand unfinished jobs back at once (graceful stop): another replica takes them without waiting
        for the lease; the attempt does not count."""
        if not job_ids:
            return 0
        marks = ",".join("?" * len(job_ids))
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE fleet_jobs SET status = 'queued', owner = NULL, lease_until = NULL, attempts = attempts - 1 "
                f"WHERE owner = ? AND status = 'running' AND id IN ({marks})", (owner, *job_ids),
            )
            return cur.rowcount

    def complete(self, job_id: int, owner: str, report: HostReport) -> bool:
        """Store the host's result if `owner` still holds the job; False means another replica took it over
        (its result will be the one reported)."""
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE fleet_jobs SET status = 'done', result = ?, finished = ?, lease_until = NULL "
                "WHERE id = ? AND owner = ? AND status = 'running'",
                (host_report_to_json(report), self._clock(), job_id, owner),
            )
            return cur.rowcount == 1

    def take_summary(self, run_id: int, owner: str) -> FleetRun | None:
        """The finished run, to exactly one caller: when every host has its result and nobody (alive)
        is summarising it yet."""
        now = self._clock()
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE fleet_runs SET status = 'summarizing', summary_owner = ?, summary_until = ? "
                "WHERE id = ? AND (status = 'running' OR (status = 'summarizing' AND summary_until < ?)) "
                "AND NOT EXISTS (SELECT 1 FROM fleet_jobs WHERE run_id = ? AND status <> 'done')",
                (owner, now + SUMMARY_LEASE_S, run_id, now, run_id),
            )
            if cur.rowcount != 1:
                return None
            return self._load(conn, run_id)

    def finished(self, run_id: int, owner: str) -> None:
        with self.db.write() as conn:
            conn.execute("UPDATE fleet_runs SET status = 'done', finished = ? WHERE id = ? AND summary_owner = ?",
                         (self._clock(), run_id, owner))

    def summaries_due(self) -> list[int]:
        """Runs whose hosts are all in but which have no (live) summariser: their last host's replica died
        between storing the result and taking the summary."""
        now = self._clock()
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT r.id FROM fleet_runs r WHERE (r.status = 'running' OR (r.status = 'summarizing' "
                "AND r.summary_until < ?)) AND NOT EXISTS (SELECT 1 FROM fleet_jobs j WHERE j.run_id = r.id "
                "AND j.status <> 'done')", (now,),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def open_audit_runs(self) -> list[int]:
        """Audit ids of fleet runs not yet summarised (their audit rows are legitimately `running`)."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT audit_run_id FROM fleet_runs WHERE status <> 'done' "
                                "AND audit_run_id IS NOT NULL").fetchall()
        return [int(r[0]) for r in rows]

    def progress(self, run_id: int) -> tuple[int, int]:
        """(hosts done, hosts total)."""
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0), COUNT(*) "
                "FROM fleet_jobs WHERE run_id = ?", (run_id,),
            ).fetchone()
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    def depth(self) -> int:
        """Host jobs not yet done, over all runs (the queue-depth metric)."""
        with self.db.read() as conn:
            return int(one(conn.execute("SELECT COUNT(*) FROM fleet_jobs WHERE status <> 'done'"))[0])

    def _load(self, conn: Any, run_id: int) -> FleetRun:
        run = conn.execute("SELECT id, audit_run_id, target, spec, created FROM fleet_runs WHERE id = ?",
                           (run_id,)).fetchone()
        jobs = conn.execute("SELECT result FROM fleet_jobs WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()
        return FleetRun(id=int(run[0]), audit_run_id=run[1], target=str(run[2]), spec=json.loads(run[3]),
                        created=float(run[4]), hosts=[host_report_from_json(j[0]) for j in jobs])
