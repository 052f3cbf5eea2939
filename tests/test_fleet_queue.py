"""The fleet queue (bot/runner/fleet.py) on SQLite and a real PostgreSQL: disjoint claims, leases that
expire when a replica dies, late results of a lost lease dropped, the summary handed out once, a host
given up after MAX_ATTEMPTS, jobs handed back on a graceful stop. A fake clock drives the leases."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bot.runner.fleet import MAX_ATTEMPTS, FleetQueue, host_report_from_json, host_report_to_json
from bot.runner.report import CheckResult, HostReport
from bot.storage import Database, open_database

HOSTS = [f"gpu-{i:02d}" for i in range(5)]
SPEC = {"channel": "C1", "ts": "1.2", "checks": None, "max_tier": 0}


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "postgresql":
        return open_database(request.getfixturevalue("postgres_url"))
    return open_database(tmp_path / "fleet.sqlite3")


def ok(host: str, by: str) -> HostReport:
    return HostReport(host=host, address="127.0.0.1", checks=[
        CheckResult(id="system.shm", title="shm", verdict="ok", message=f"checked by {by}", stdout="64G")])


def test_two_replicas_split_the_hosts_and_one_gets_the_summary(db: Database) -> None:
    now = [100.0]
    a, b = (FleetQueue(db, clock=lambda: now[0]) for _ in range(2))
    run_id = a.enqueue(SPEC, HOSTS, target="fleet", audit_run_id=7)
    got_a, got_b = a.claim("A", 3, lease_s=60), b.claim("B", 3, lease_s=60)
    assert [j.host for j in got_a] == HOSTS[:3] and [j.host for j in got_b] == HOSTS[3:]
    assert got_a[0].spec == SPEC and got_a[0].attempts == 1
    assert a.claim("A", 3, lease_s=60) == [] and a.progress(run_id) == (0, 5) and a.depth() == 5
    for job in got_b:
        assert b.complete(job.id, "B", ok(job.host, "B"))
    assert b.take_summary(run_id, "B") is None  # hosts still running on A
    for job in got_a:
        assert a.complete(job.id, "A", ok(job.host, "A"))
    winners = [q.take_summary(run_id, name) for q, name in ((a, "A"), (b, "B"), (a, "A"))]
    assert [w is not None for w in winners] == [True, False, False]
    run = winners[0]
    assert run is not None and run.audit_run_id == 7 and run.target == "fleet" and run.spec == SPEC
    assert [h.host for h in run.hosts] == HOSTS  # in the order asked for, each once
    assert [h.checks[0].message for h in run.hosts] == ["checked by A"] * 3 + ["checked by B"] * 2
    assert a.open_audit_runs() == [7]  # summarising: its audit row is still legitimately running
    a.finished(run_id, "A")
    assert a.summaries_due() == [] and a.depth() == 0 and a.open_audit_runs() == []


def test_a_dead_replicas_hosts_are_retried_and_its_late_results_dropped(db: Database) -> None:
    now = [100.0]
    q = FleetQueue(db, clock=lambda: now[0])
    run_id = q.enqueue(SPEC, HOSTS[:2], target="fleet")
    lost = q.claim("A", 10, lease_s=30)
    now[0] += 10
    assert q.renew("A", [j.id for j in lost], lease_s=30) == 2  # still alive at 110: lease until 140
    now[0] += 25
    assert q.claim("B", 10, lease_s=30) == []  # 135: not expired yet
    now[0] += 10  # 145: A stopped renewing (killed)
    retried = q.claim("B", 10, lease_s=30)
    assert [(j.host, j.attempts) for j in retried] == [(h, 2) for h in HOSTS[:2]]
    assert q.renew("A", [j.id for j in lost], lease_s=30) == 0
    assert not q.complete(lost[0].id, "A", ok(HOSTS[0], "A"))  # A was only stalled: too late
    for job in retried:
        assert q.complete(job.id, "B", ok(job.host, "B"))
    run = q.take_summary(run_id, "B")
    assert run is not None and [h.checks[0].message for h in run.hosts] == ["checked by B"] * 2


def test_a_host_that_keeps_losing_its_replica_is_given_up(db: Database) -> None:
    now = [0.0]
    q = FleetQueue(db, clock=lambda: now[0])
    run_id = q.enqueue(SPEC, ["gpu-00"], target="gpu-00")
    for attempt in range(1, MAX_ATTEMPTS + 1):
        (job,) = q.claim(f"R{attempt}", 1, lease_s=5)
        assert job.attempts == attempt
        now[0] += 6
    assert q.claim("R9", 1, lease_s=5) == []
    run = q.take_summary(run_id, "R9")
    assert run is not None and run.hosts[0].error is not None and "replicas lost this host" in run.hosts[0].error


def test_a_stopping_replica_hands_its_jobs_back_at_once(db: Database) -> None:
    q = FleetQueue(db, clock=lambda: 0.0)
    q.enqueue(SPEC, HOSTS[:2], target="fleet")
    jobs = q.claim("A", 10, lease_s=600)
    assert q.release("A", [j.id for j in jobs]) == 2
    again = q.claim("B", 10, lease_s=600)
    assert [(j.host, j.attempts) for j in again] == [(h, 1) for h in HOSTS[:2]]  # a hand-back is no attempt


def test_a_summary_whose_owner_died_is_found_again(db: Database) -> None:
    now = [0.0]
    q = FleetQueue(db, clock=lambda: now[0])
    run_id = q.enqueue(SPEC, ["gpu-00"], target="gpu-00")
    (job,) = q.claim("A", 1, lease_s=5)
    q.complete(job.id, "A", ok("gpu-00", "A"))
    assert q.summaries_due() == [run_id]  # A died before taking the summary
    assert q.take_summary(run_id, "A") is not None
    assert q.summaries_due() == [] and q.take_summary(run_id, "B") is None
    now[0] += 1000  # …and A died while posting it
    assert q.summaries_due() == [run_id] and q.take_summary(run_id, "B") is not None


def test_concurrent_claims_never_hand_out_a_job_twice(db: Database) -> None:
    q = FleetQueue(db)
    run_ids = [q.enqueue(SPEC, [f"h{r}-{i}" for i in range(15)], target=f"g{r}") for r in range(3)]
    taken: list[str] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        mine = FleetQueue(db)
        while jobs := mine.claim(name, 3, lease_s=600):
            for job in jobs:
                assert mine.complete(job.id, name, ok(job.host, name))
            with lock:
                taken.extend(j.host for j in jobs)

    threads = [threading.Thread(target=worker, args=(f"W{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(f"h{r}-{i}" for r in range(3) for i in range(15))
    assert [q.progress(r) for r in run_ids] == [(15, 15)] * 3


def test_host_reports_round_trip_through_json() -> None:
    report = HostReport(host="gpu-01", address="10.0.0.1", error=None, checks=[
        CheckResult(id="gpu.xid", title="Xid", verdict="fail", message="Xid 79", cases=["xid-79"], duration_s=0.5,
                    tier=1, why="fallen off the bus", command="dmesg", rc=0, stdout="NVRM: Xid 79", facts={"xid": [79]})])
    assert host_report_from_json(host_report_to_json(report)) == report
