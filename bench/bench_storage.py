"""Per-operation latency of the storage hot paths, SQLite vs PostgreSQL (issue 11):

    dedup claim     SlackStateDB.claim (one INSERT … ON CONFLICT DO NOTHING per Slack delivery)
    audit insert    AuditLog.start + finish (a run with 3 results)
    answer lookup   SlackStateDB.load_answer (the buttons on an answer)

    .venv/bin/python bench/bench_storage.py [--n 500] [--threads 1] [--json]

SQLite: a temp file (WAL). PostgreSQL: a throw-away server started here (tests/postgres_support.py; needs
the Debian `postgresql` package and, as root, the `postgres` user), on 127.0.0.1, fsync off like the test
server (a production server with fsync on pays one WAL flush per commit more).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from postgres_support import start_postgres  # noqa: E402

from bot.runner.audit import AuditLog  # noqa: E402
from bot.slack.recent import AnswerRecord  # noqa: E402
from bot.slack.store import SlackStateDB  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Host:
    def __init__(self, name: str) -> None:
        self.host, self.error = name, None
        self.checks = [type("C", (), {"id": f"c{i}", "verdict": "ok", "message": "fine"})() for i in range(3)]


def measure(op: Callable[[int], object], n: int, threads: int) -> dict[str, float]:
    def timed(i: int) -> float:
        started = time.perf_counter()
        op(i)
        return (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        ms = list(pool.map(timed, range(n)))
    wall = time.perf_counter() - started
    return {"p50_ms": round(percentile(ms, 0.5), 3), "p99_ms": round(percentile(ms, 0.99), 3),
            "ops_per_s": round(n / wall, 1)}


def bench(target: str | Path, n: int, threads: int) -> dict[str, dict[str, float]]:
    state = SlackStateDB(target, retention_s=1e12)
    audit = AuditLog(target)
    for i in range(n):
        state.save_answer(AnswerRecord(answer_id=f"a{i}", user_id="U1", channel_id="C1", thread_ts="1.1",
                                       message_ts="1.2", verdict="match", case_id="kv", title="t", evidence="e",
                                       created=time.time()))
    tag = str(time.time_ns())

    def audit_run(i: int) -> None:
        run_id = audit.start(user_id="U1", channel_id="C1", source="slack", target="h", hosts=["h"],
                             checks=["c0", "c1", "c2"], max_tier=0)
        audit.finish(run_id, type("R", (), {"hosts": [Host("h")]})())

    return {
        "dedup_claim": measure(lambda i: state.claim(f"event:{tag}:{i}", "bench"), n, threads),
        "audit_insert": measure(audit_run, n, threads),
        "answer_lookup": measure(lambda i: state.load_answer(f"a{i}"), n, threads),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, object] = {"n": args.n, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = bench(Path(tmp) / "bench.sqlite3", args.n, args.threads)
    server = start_postgres()
    try:
        results["postgresql"] = bench(server.create_database("bench"), args.n, args.threads)
    finally:
        server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.n} operations each, {args.threads} thread(s)")
    print(f"{'operation':<15}{'backend':<12}{'p50 ms':>9}{'p99 ms':>9}{'ops/s':>10}")
    for op in ("dedup_claim", "audit_insert", "answer_lookup"):
        for backend in ("sqlite", "postgresql"):
            row = results[backend][op]  # type: ignore[index]
            print(f"{op:<15}{backend:<12}{row['p50_ms']:>9}{row['p99_ms']:>9}{row['ops_per_s']:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
