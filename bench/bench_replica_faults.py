"""Replica faults (issue 28): two `vllm-doctor serve --http` replicas on one PostgreSQL, bursts of pasted
logs, and three faults:

    sigkill    a burst of N pastes to replica A, SIGKILL of A after its first placeholder; Slack's retries
               (re-sent while the answer is 503, as Slack does) to B: events never answered, events with
               more than one message or answer
    sigterm    the same with SIGTERM (A drains, hands back): events lost, answered twice
    pg_restart a quick PostgreSQL restart, then each of N events at both replicas at once: answered twice?
    postgres   PostgreSQL stopped for --outage seconds while N pastes (and a retry of each at the same
               replica) arrive: error answers, repeats from one replica, time of the first /readyz 503 after
               the stop and how long that request took, time from the restart to /readyz 200

    .venv/bin/python bench/bench_replica_faults.py [--n 50] [--outage 20] [--lease 5] [--json]

Everything runs on this machine (fake Slack, throw-away PostgreSQL, replicas as processes); timings on a
busy 2-core machine are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "slack")]

from fake_slack import FakeSlack  # noqa: E402
from postgres_support import PostgresServer, start_postgres  # noqa: E402
from replica_support import Replica, replica_env, start_replica, wait_ready  # noqa: E402
from slack_logs import KV_CACHE_LOG  # noqa: E402

ALICE = "U0ALICE1"
PASTE = KV_CACHE_LOG.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def dm(ts: str) -> dict[str, Any]:
    return {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": ALICE, "text": PASTE,
            "ts": ts, "event_ts": ts}


def until_acked(replica: Replica, event_id: str, ts: str) -> int:
    for attempt in range(1, 200):
        if replica.sender.event(dm(ts), event_id, retry_num=attempt).status == 200:
            return attempt
        time.sleep(0.5)
    return -1


def outcome(fake: FakeSlack, threads: set[str], wait_s: float) -> dict[str, Any]:
    def answered(calls: list[Any]) -> tuple[Counter[str], Counter[str], int]:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") in threads]
        thread_of = {c.params.get("_ts"): str(c.params["thread_ts"]) for c in posted}
        finals = Counter(thread_of[c.params["ts"]] for c in calls if c.method == "chat.update"
                         and c.params.get("ts") in thread_of and "answer_actions" in json.dumps(c.params.get("blocks")))
        errors = sum("something went wrong" in str(c.params.get("text")) for c in calls
                     if c.method in ("chat.postMessage", "chat.update"))
        return Counter(str(c.params["thread_ts"]) for c in posted), finals, errors

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and set(answered(fake.calls)[1]) < threads:
        time.sleep(0.5)
    time.sleep(3)
    messages, finals, errors = answered(fake.calls)
    return {"events": len(threads), "unanswered": len(threads - set(finals)),
            "more_than_one_message": sum(1 for t in threads if messages[t] > 1),
            "error_answers": errors}


def burst_then_signal(fake: FakeSlack, a: Replica, b: Replica, n: int, sig: int, tag: str) -> dict[str, Any]:
    fake.clear()
    events = [(f"Ev{tag}{i:04d}", f"17000{6 + (sig == signal.SIGKILL)}0000.{i:06d}") for i in range(n)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda e: a.sender.event(dm(e[1]), e[0]).status, events))
    fake.wait_for(lambda calls: any(c.method == "chat.postMessage" for c in calls), timeout=600)
    answered_before = sum(1 for c in fake.calls if c.method == "chat.update"
                          and "answer_actions" in json.dumps(c.params.get("blocks")))
    a.proc.send_signal(sig)
    a.proc.wait(timeout=300)
    found = re.search(r"handed back (\d+) unanswered", a.log.read_text(encoding="utf-8"))
    handed = int(found.group(1)) if found else 0
    with ThreadPoolExecutor(8) as pool:
        attempts = list(pool.map(lambda e: until_acked(b, *e), events))
    result = outcome(fake, {ts for _, ts in events}, wait_s=900)
    return result | {"answered_before_signal": answered_before, "retries_refused_503": sum(a - 1 for a in attempts
                                                                                          if a > 0),
                     "exit_code": a.proc.returncode, "handed_back": handed}


def postgres_outage(fake: FakeSlack, server: PostgresServer, a: Replica, b: Replica, n: int, outage_s: float
                    ) -> dict[str, Any]:
    fake.clear()
    stopped = time.monotonic()
    server.pause()
    first_503 = None
    probe_s = []
    while first_503 is None and time.monotonic() - stopped < 30:
        t0 = time.monotonic()
        status = a.get("/readyz")[0]
        probe_s.append(time.monotonic() - t0)
        if status == 503:
            first_503 = time.monotonic() - stopped
    events = [(f"EvPG{i:04d}", f"1700008000.{i:06d}", (a, b)[i % 2]) for i in range(n)]
    acks = []

    def send(e: tuple[str, str, Replica]) -> None:
        for retry in (None, 1):
            t0 = time.monotonic()
            e[2].sender.event(dm(e[1]), e[0], retry_num=retry)
            acks.append(time.monotonic() - t0)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, events))
    time.sleep(max(0.0, outage_s - (time.monotonic() - stopped)))
    server.resume()
    back = time.monotonic()
    ready_after = None
    while ready_after is None and time.monotonic() - back < 60:
        if a.get("/readyz")[0] == 200 and b.get("/readyz")[0] == 200:
            ready_after = time.monotonic() - back
        else:
            time.sleep(0.1)
    result = outcome(fake, {ts for _, ts, _ in events}, wait_s=900)
    return result | {"outage_s": round(back - stopped, 1),
                     "readyz_503_after_s": None if first_503 is None else round(first_503, 2),
                     "readyz_request_max_s": round(max(probe_s), 2),
                     "ack_max_s_during_outage": round(max(acks), 2),
                     "ready_again_after_s": None if ready_after is None else round(ready_after, 2)}


def postgres_restart(fake: FakeSlack, server: PostgresServer, a: Replica, b: Replica, n: int) -> dict[str, Any]:
    """A quick `pg_ctl restart` (stop -m fast + start), then each event at both replicas at once: the pooled
    connections died with the server; a claim must not fail on one of them (and answer anyway)."""
    fake.clear()
    for replica in (a, b):  # every pooled connection in use once, so the pools hold some
        replica.get("/readyz")
    server.pause()
    server.resume()
    events = [(f"EvRS{i:04d}", f"1700009500.{i:06d}") for i in range(n)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda e: [r.sender.event(dm(e[1]), e[0]).status for r in (a, b)], events))
    return outcome(fake, {ts for _, ts in events}, wait_s=900)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--outage", type=float, default=20.0)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--drain", type=float, default=0.5, help="VLLM_DOCTOR_DRAIN: short, so that SIGTERM "
                        "leaves work to hand back")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from bot.settings import Settings

    workdir = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    server = start_postgres()
    fake = FakeSlack().start()
    env = replica_env(fake.base_url, server.create_database("faults"), Settings().index_dir,
                      VLLM_DOCTOR_CLAIM_LEASE=str(args.lease), VLLM_DOCTOR_DRAIN=str(args.drain),
                      VLLM_DOCTOR_DRAIN_DELAY="1", VLLM_DOCTOR_SLACK_WORKERS="2")
    replicas: list[Replica] = []

    def replica() -> Replica:
        r = start_replica(env, workdir, len(replicas))
        replicas.append(r)
        wait_ready(r)
        return r

    results: dict[str, Any] = {}
    try:
        a, b = replica(), replica()
        results["postgres"] = postgres_outage(fake, server, a, b, args.n, args.outage)
        results["pg_restart"] = postgres_restart(fake, server, a, b, args.n)
        results["sigterm"] = burst_then_signal(fake, a, b, args.n, signal.SIGTERM, "TERM")
        a = replica()
        results["sigkill"] = burst_then_signal(fake, a, b, args.n, signal.SIGKILL, "KILL")
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(timeout=60)
        fake.stop()
        server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, values in results.items():
            print(f"{name:9s} " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
