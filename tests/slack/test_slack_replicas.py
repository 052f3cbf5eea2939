"""Two `vllm-doctor serve --http` processes on one real PostgreSQL database, behind the fake Slack, with
20 fake GPU hosts on a real sshd (issue 11, end to end):

  * 200 events, with Slack retries and the same event sent to both replicas → each answered once;
  * feedback votes and audited /vllm-diagnose refusals sent to both at once → none lost;
  * `kill -9` of the replica that took a 20-host group diagnosis, mid-run → the other replica retries
    its hosts after the lease: every host reported once, the summary posted once, the audit row closed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from replica_support import Replica, replica_env, start_replica, wait_ready
from runner_support import Fleet, start_fleet
from slack_logs import KV_CACHE_LOG
from sshd_support import require_sshd

from bot.storage import open_database

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HOSTS = {f"gpu-{i:02d}": (f"127.0.0.{2 + i}", "healthy") for i in range(20)}
ALICE, MALLORY = "U0ALICE1", "U0MALLRY"
LEASE_S = 4


@dataclass
class Cluster:
    replicas: list[Replica]
    fake: FakeSlack
    db_url: str
    fleet: Fleet


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any, doctor: Any, settings: Any
            ) -> Iterator[Cluster]:
    require_sshd()
    workdir = tmp_path_factory.mktemp("replicas")
    fleet = start_fleet(workdir, HOSTS)
    fake = FakeSlack().start()
    db_url = postgres_server.create_database("replicas")
    env = replica_env(fake.base_url, db_url, settings.index_dir, fleet,
                      VLLM_DOCTOR_RUNNER_ACCESS=json.dumps([{"hosts": ["*"], "users": [ALICE]}]),
                      VLLM_DOCTOR_RUNNER_MAX_HOSTS="2",  # small batches: the run spans both replicas
                      VLLM_DOCTOR_FLEET_LEASE=str(LEASE_S))
    replicas = [start_replica(env, workdir, n) for n in range(2)]
    try:
        for replica in replicas:
            wait_ready(replica)
        yield Cluster(replicas, fake, db_url, fleet)
    finally:
        for replica in replicas:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGTERM)
        for replica in replicas:
            try:
                replica.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                replica.proc.kill()
                replica.proc.wait(timeout=30)
        fake.stop()
        fleet.stop()


def _dm(ts: str, text: str) -> dict[str, Any]:
    return {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": ALICE, "text": text,
            "ts": ts, "event_ts": ts}


def test_both_replicas_are_ready_and_export_metrics(cluster: Cluster) -> None:
    for replica in cluster.replicas:
        status, body = replica.get("/readyz")
        assert status == 200 and "database: postgresql" in body and "kb: " in body
        assert replica.get("/healthz")[0] == 200
        status, metrics = replica.get("/metrics")
        assert status == 200 and "vllm_doctor_ack_seconds_bucket" in metrics


def test_each_of_200_events_is_answered_exactly_once(cluster: Cluster) -> None:
    fake, (a, b) = cluster.fake, cluster.replicas
    pastes = {f"1700002000.{i:06d}" for i in range(6)}
    events = [(f"EvREPL{i:04d}", f"1700002000.{i:06d}") for i in range(200)]
    deliveries: list[tuple[Replica, str, str, int | None]] = []
    for n, (event_id, ts) in enumerate(events):
        first = (a, b)[n % 2]
        deliveries.append((first, event_id, ts, None))
        if n % 3 == 0:
            deliveries.append(((b, a)[n % 2], event_id, ts, None))  # the same event at the other replica
        if n % 4 == 0:
            deliveries.append((first, event_id, ts, 1))  # Slack's retry
    random.Random(11).shuffle(deliveries)

    def send(item: tuple[Replica, str, str, int | None]) -> int:
        replica, event_id, ts, retry = item
        text = KV_CACHE_LOG.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") if ts in pastes \
            else f"hello {ts}"
        for _ in range(60):  # a retry that meets the other replica's live lease gets 503: Slack tries again
            status = replica.sender.event(_dm(ts, text), event_id, retry_num=retry).status
            if status != 503 or retry is None:
                return status
            retry += 1
            time.sleep(0.5)
        return status

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(send, deliveries)) == {200}
    assert len(deliveries) > 300

    def answers(calls: list[Any]) -> Counter[str]:
        return Counter(c.params.get("thread_ts") for c in calls
                       if (c.method == "chat.postEphemeral" and c.params.get("thread_ts") not in pastes)
                       or (c.method == "chat.postMessage" and c.params.get("thread_ts") in pastes))

    fake.wait_for(lambda calls: len(answers(calls)) >= 200, timeout=300)
    time.sleep(3)  # let any duplicate that was going to be answered arrive (none may)
    counted = answers(fake.calls)
    assert sorted(counted) == sorted(ts for _, ts in events)
    assert [ts for ts, n in counted.items() if n != 1] == []


def _answer_id(fake: FakeSlack, ts: str) -> str:
    def final(calls: list[Any]) -> Any:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                  and c.params.get("_ts")]
        edits = [c for c in calls if posted and c.method == "chat.update" and c.params.get("ts") == posted[0].params["_ts"]
                 and "answer_actions" in json.dumps(c.params.get("blocks"))]
        return edits[-1] if edits else None

    update = final(fake.wait_for(lambda calls: final(calls) is not None, timeout=300))
    return str(update.params["blocks"][-1]["elements"][0]["value"])


def test_concurrent_feedback_and_audit_writes_from_both_replicas_are_all_kept(cluster: Cluster) -> None:
    fake, (a, b) = cluster.fake, cluster.replicas
    answer_ids = [_answer_id(fake, f"1700002000.{i:06d}") for i in range(6)]
    users = [f"U0VOTER{i}" for i in range(8)]

    def vote(item: tuple[int, str, str]) -> int:
        n, answer_id, user = item
        payload = {
            "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T0TEST01"},
            "api_app_id": "A0TEST", "team": {"id": "T0TEST01"}, "channel": {"id": "D0DM0001"},
            "container": {"type": "message", "message_ts": "1700002000.500000", "channel_id": "D0DM0001"},
            "message": {"ts": "1700002000.500000", "thread_ts": "1700002000.000000", "text": "answer"},
            "trigger_id": f"1337.{n}.vote", "response_url": fake.response_url(f"vote-{n}"),
            "actions": [{"action_id": "feedback_fixed", "block_id": "answer_actions", "type": "button",
                         "value": answer_id, "action_ts": str(time.time())}],
        }
        return (a, b)[n % 2].sender.interactive(payload).status

    def refused(n: int) -> int:
        return (a, b)[n % 2].sender.command("/vllm-diagnose", "fleet", user=MALLORY,
                                            response_url=fake.response_url(f"refused-{n}")).status

    votes = [(n, answer_id, user) for n, (answer_id, user) in
             enumerate((x, u) for x in answer_ids for u in users)]
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(vote, v) for v in votes] + [pool.submit(refused, n) for n in range(30)]
        assert {f.result() for f in futures} == {200}

    db = open_database(cluster.db_url)

    def counts() -> tuple[int, int, int]:
        with db.read() as conn:
            kb_votes = conn.execute("SELECT COUNT(*) FROM votes WHERE value = 'fixed'").fetchone()[0]
            slack_votes = conn.execute("SELECT COUNT(*) FROM feedback WHERE value = 'fixed'").fetchone()[0]
            refusals = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'refused' AND user_id = ?",
                                    (MALLORY,)).fetchone()[0]
        return int(kb_votes), int(slack_votes), int(refusals)

    fake.wait_for(lambda calls: sum(c.method == "response_url" for c in calls) >= len(votes) + 30, timeout=120)
    assert counts() == (len(votes), len(votes), 30)


def test_kill_9_mid_fan_out_every_host_reported_once_and_audit_closed(cluster: Cluster) -> None:
    fake, a = cluster.fake, cluster.replicas[0]
    db = open_database(cluster.db_url)
    fake.clear()
    assert a.sender.command("/vllm-diagnose", "fleet system", user=ALICE, channel="C0CHAN01",
                            response_url=fake.response_url("fleet")).status == 200
    owner_a = f":{a.proc.pid}:"

    def a_holds_a_host() -> bool:
        with db.read() as conn:
            return conn.execute("SELECT COUNT(*) FROM fleet_jobs WHERE status = 'running' AND owner LIKE ?",
                                (f"%{owner_a}%",)).fetchone()[0] > 0

    deadline = time.monotonic() + 120
    while not a_holds_a_host():
        assert time.monotonic() < deadline, "replica A never claimed a host"
        time.sleep(0.02)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(timeout=30)

    def summaries(calls: list[Any]) -> list[Any]:
        return [c for c in calls if c.method == "chat.update" and "host_verdict" in json.dumps(c.params.get("blocks"))]

    fake.wait_for(lambda calls: len(summaries(calls)) >= 1, timeout=300)
    time.sleep(LEASE_S + 2)  # a second summary would come from a late or duplicated job: none may
    (summary,) = summaries(fake.calls)
    text = json.dumps(summary.params)
    assert all(text.count(name) >= 1 for name in HOSTS)
    with db.read() as conn:
        jobs = conn.execute("SELECT host, status, attempts, result FROM fleet_jobs").fetchall()
        runs = conn.execute("SELECT status, finished_at FROM runs WHERE target = 'fleet' AND user_id = ?",
                            (ALICE,)).fetchall()
        results = conn.execute("SELECT host, COUNT(*) FROM results GROUP BY host").fetchall()
    assert sorted(j["host"] for j in jobs) == sorted(HOSTS)  # one job per host
    assert {j["status"] for j in jobs} == {"done"}
    assert max(j["attempts"] for j in jobs) >= 2  # the killed replica's hosts were retried elsewhere
    assert all(json.loads(j["result"])["error"] is None for j in jobs)
    assert [tuple(r) for r in runs] and all(r["status"] == "done" and r["finished_at"] for r in runs)
    assert {r[0] for r in results} == set(HOSTS)
    raw = [c for c in fake.calls_to("files.getUploadURLExternal") if str(c.params.get("filename", "")).startswith("diagnose-")]
    assert len(raw) == 1  # raw outputs uploaded once (the fleet pictures are uploads of their own)


def test_sigterm_stops_a_replica_cleanly_and_its_json_logs_carry_request_ids(cluster: Cluster) -> None:
    b = cluster.replicas[1]
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=120) == 0
    lines = [json.loads(line) for line in b.log.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    assert lines and all({"ts", "level", "logger", "request_id", "message"} <= set(line) for line in lines)
    skipped = [line for line in lines if line["message"].startswith("skipping repeated delivery event:EvREPL")]
    assert skipped and all(line["request_id"] in line["message"] for line in skipped)
