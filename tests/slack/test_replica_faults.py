"""Replica faults, end to end (issue 28): two `vllm-doctor serve --http` processes on one real PostgreSQL
server of their own, behind the fake Slack; a short claim lease (VLLM_DOCTOR_CLAIM_LEASE) stands in for
minutes of waiting. The test plays Slack's part: it re-delivers an event (X-Slack-Retry-Num) until a
replica answers 2xx, as Slack does for a 5xx.

  * SIGTERM of a replica in a burst of pastes: /readyz says 503 first, it exits 0 and hands its
    unanswered deliveries back; their retries at the survivor are answered, each paste exactly once
    (one message per paste: a placeholder the stopped replica posted is the one edited);
  * PostgreSQL stopped: /readyz 503, every paste still answered (no error answer), a retry at the same
    replica not answered again; PostgreSQL back: /readyz 200 again, claims shared again;
  * SIGKILL of a replica holding unanswered pastes: every retry answered by the survivor, once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from postgres_support import PostgresServer, start_postgres
from replica_support import Replica, replica_env, start_replica, wait_ready
from slack_logs import KV_CACHE_LOG

pytestmark = [pytest.mark.slow]

ALICE = "U0ALICE1"
LEASE_S = 3
PASTE = KV_CACHE_LOG.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class Cluster:
    replicas: list[Replica]
    fake: FakeSlack
    server: PostgresServer
    env: dict[str, str]
    workdir: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, doctor: Any, settings: Any) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("faults")
    server = start_postgres()
    fake = FakeSlack().start()
    db_url = server.create_database("faults")
    env = replica_env(fake.base_url, db_url, settings.index_dir,
                      VLLM_DOCTOR_CLAIM_LEASE=str(LEASE_S), VLLM_DOCTOR_DRAIN="1", VLLM_DOCTOR_DRAIN_DELAY="2",
                      VLLM_DOCTOR_SLACK_WORKERS="2")
    replicas = [start_replica(env, workdir, n) for n in range(2)]
    try:
        for replica in replicas:
            wait_ready(replica)
        yield Cluster(replicas, fake, server, env, workdir)
    finally:
        for replica in replicas:
            if replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait(timeout=60)
        fake.stop()
        server.stop()


def _dm(ts: str, text: str = PASTE) -> dict[str, Any]:
    return {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": ALICE, "text": text,
            "ts": ts, "event_ts": ts}


def _deliver_until_acked(replica: Replica, event_id: str, ts: str, first_retry: int = 1) -> int:
    """Slack's retries: again and again while the answer is a 5xx (bounded)."""
    for attempt in range(first_retry, first_retry + 60):
        status = replica.sender.event(_dm(ts), event_id, retry_num=attempt).status
        if status == 200:
            return attempt
        assert status == 503, status
        time.sleep(0.5)
    raise AssertionError(f"{event_id} never acknowledged")


def _answers(calls: list[Any], threads: set[str]) -> tuple[Counter[str], set[str]]:
    """Per paste thread: how many messages were posted, and which threads got their final answer."""
    posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") in threads]
    per_thread = Counter(str(c.params["thread_ts"]) for c in posted)
    thread_of = {c.params.get("_ts"): str(c.params["thread_ts"]) for c in posted}
    answered = {thread_of[c.params.get("ts")] for c in calls
                if c.method == "chat.update" and c.params.get("ts") in thread_of
                and "answer_actions" in json.dumps(c.params.get("blocks"))}
    return per_thread, answered


def _no_error_answer(calls: list[Any]) -> None:
    texts = [str(c.params.get("text")) for c in calls if c.method in ("chat.postMessage", "chat.update")]
    assert not [t for t in texts if "something went wrong" in t]


def _wait_for_answers(fake: FakeSlack, threads: set[str], timeout: float = 600) -> None:
    fake.wait_for(lambda calls: _answers(calls, threads)[1] >= threads, timeout=timeout)


def _metric(replica: Replica, name: str) -> float:
    status, body = replica.get("/metrics")
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name))


def _restart(cluster: Cluster, n: int) -> Replica:
    replica = start_replica(cluster.env, cluster.workdir, 10 + n + len(cluster.replicas))
    wait_ready(replica)
    cluster.replicas[n] = replica
    return replica


def test_sigterm_drains_then_hands_back_and_the_survivor_answers_each_once(cluster: Cluster) -> None:
    fake, (a, b) = cluster.fake, cluster.replicas
    fake.clear()
    fake.latency["chat.update"] = 0.5  # each answer takes a while: the 3 s of drain cannot finish 24
    events = [(f"EvTERM{i:03d}", f"1700003000.{i:06d}") for i in range(24)]
    with ThreadPoolExecutor(6) as pool:
        assert set(pool.map(lambda e: a.sender.event(_dm(e[1]), e[0]).status, events)) == {200}
    fake.wait_for(lambda calls: any(c.method == "chat.postMessage" for c in calls), timeout=300)
    a.proc.send_signal(signal.SIGTERM)
    seen_draining = False
    while a.proc.poll() is None and not seen_draining:  # the delay: /readyz says 503 while requests are taken
        try:
            status, body = a.get("/readyz")
        except OSError:
            break
        seen_draining = status == 503 and "serving: draining" in body
    assert seen_draining
    assert a.proc.wait(timeout=120) == 0
    log = a.log.read_text(encoding="utf-8")
    assert "handed back" in log  # 2 workers, 24 pastes, 3 s in all: some were left
    # the answers it was writing at the end say so, instead of a dangling "working on it"
    assert any("stopped before it could finish" in str(c.params.get("text")) for c in fake.calls
               if c.method == "chat.update")
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda e: _deliver_until_acked(b, *e), events))
    threads = {ts for _, ts in events}
    _wait_for_answers(fake, threads)
    time.sleep(2)  # a second answer that was going to come would be here by now
    per_thread, answered = _answers(fake.calls, threads)
    assert answered == threads
    assert [ts for ts in threads if per_thread[ts] != 1] == []
    _no_error_answer(fake.calls)
    assert _metric(b, 'vllm_doctor_claims_total{outcome="retaken"}') >= 1
    fake.latency.clear()
    _restart(cluster, 0)


def test_postgres_outage_no_error_answers_no_repeat_and_ready_again(cluster: Cluster) -> None:
    fake, (a, b) = cluster.fake, cluster.replicas
    fake.clear()
    cluster.server.pause()
    try:
        for replica in (a, b):
            status, body = replica.get("/readyz")
            assert status == 503 and "database:" in body
        events = [(f"EvDOWN{i:03d}", f"1700004000.{i:06d}", (a, b)[i % 2]) for i in range(6)]
        for event_id, ts, replica in events:
            assert replica.sender.event(_dm(ts), event_id).status == 200
            assert replica.sender.event(_dm(ts), event_id, retry_num=1).status == 200  # a repeat here: not again
        threads = {ts for _, ts, _ in events}
        _wait_for_answers(fake, threads)
    finally:
        cluster.server.resume()
    for replica in (a, b):
        for _ in range(200):  # bounded: ready again once a statement succeeds
            if replica.get("/readyz")[0] == 200:
                break
            time.sleep(0.1)
        assert replica.get("/readyz")[0] == 200
    time.sleep(2)
    per_thread, answered = _answers(fake.calls, threads)
    assert answered == threads and [ts for ts in threads if per_thread[ts] != 1] == []
    _no_error_answer(fake.calls)
    assert _metric(a, 'vllm_doctor_claims_total{outcome="offline"}') >= 1
    # back to shared claims: one event at both replicas is answered once
    after = [(f"EvBACK{i:03d}", f"1700004100.{i:06d}") for i in range(4)]
    for event_id, ts in after:
        assert {a.sender.event(_dm(ts), event_id).status, b.sender.event(_dm(ts), event_id).status} == {200}
    _wait_for_answers(fake, {ts for _, ts in after})
    time.sleep(2)
    per_thread, _ = _answers(fake.calls, {ts for _, ts in after})
    assert sorted(per_thread.values()) == [1] * len(after)


def test_sigkill_with_unanswered_pastes_every_retry_answered_once_by_the_survivor(cluster: Cluster) -> None:
    fake, (a, b) = cluster.fake, cluster.replicas
    fake.clear()
    fake.latency["chat.update"] = 0.5  # answers in progress when the kill comes
    events = [(f"EvKILL{i:03d}", f"1700005000.{i:06d}") for i in range(24)]
    with ThreadPoolExecutor(6) as pool:
        assert set(pool.map(lambda e: a.sender.event(_dm(e[1]), e[0]).status, events)) == {200}
    fake.wait_for(lambda calls: any(c.method == "chat.postMessage" for c in calls), timeout=300)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(timeout=30)
    threads = {ts for _, ts in events}
    assert _answers(fake.calls, threads)[1] != threads  # some pastes were left unanswered by the kill
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda e: _deliver_until_acked(b, *e), events))
    _wait_for_answers(fake, threads)
    time.sleep(LEASE_S + 1)
    per_thread, answered = _answers(fake.calls, threads)
    assert answered == threads
    assert [ts for ts in threads if per_thread[ts] != 1] == []  # the dead replica's placeholders were reused
    _no_error_answer(fake.calls)
    assert _metric(b, 'vllm_doctor_claims_total{outcome="retaken"}') >= 1
