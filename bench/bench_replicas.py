"""1 vs 2 bot replicas on one PostgreSQL database (issue 11):

    commands   N concurrent `/vllm-explain <log>` spread round-robin over the replicas: ack p50/p99
               (HTTP response time) and answers/s (N / time from the first send to the last answer)
    fan-out    `/vllm-diagnose fleet system.os` over H fake GPU hosts on a real sshd (127.0.0.x): wall time
               from the command to the summary, and the 1-replica / 2-replica ratio

    .venv/bin/python bench/bench_replicas.py [--commands 200] [--hosts 200] [--json]

Everything runs on this machine: replicas are `vllm-doctor serve --http` processes (real engine, KB-only
answers), Slack is the test suite's fake Web API, PostgreSQL a throw-away server (tests/postgres_support.py),
the hosts one sshd per 16 addresses (tests/runner_support.py). On a small shared machine the replicas,
sshd and the checks compete for the same cores: a ratio near 1 there says the host count is CPU-bound
here, not that replicas do not scale; on separate nodes each replica brings its own cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "slack")]

from fake_slack import FakeSlack  # noqa: E402
from postgres_support import start_postgres  # noqa: E402
from replica_support import Replica, replica_env, start_replica, wait_ready  # noqa: E402
from runner_support import start_fleet  # noqa: E402
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG  # noqa: E402

ALICE = "U0ALICE1"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bench_commands(fake: FakeSlack, replicas: list[Replica], n: int) -> dict[str, Any]:
    fake.clear()
    channels = [f"CR{i:07d}" for i in range(n)]

    def one(i: int) -> tuple[float, int]:
        sent = replicas[i % len(replicas)].sender.command(
            "/vllm-explain", escape(KV_CACHE_LOG), response_url=fake.response_url(channels[i]), channel=channels[i],
            user="U0BENCH01")
        return sent.elapsed_s * 1000, sent.status

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(one, range(n)))
    acks = [r[0] for r in results]

    def answered(calls: list[Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in calls:
            if c.method == "chat.update" and KV_CACHE_CASE in json.dumps(c.params.get("blocks")):
                out.setdefault(str(c.params.get("channel")), c.at)
        return out

    fake.wait_for(lambda calls: len(answered(calls)) >= n, timeout=900)
    done = answered(fake.calls)
    last = max(done.values())
    return {"commands": n, "statuses": sorted({r[1] for r in results}),
            "ack_p50_ms": round(percentile(acks, 50), 1), "ack_p99_ms": round(percentile(acks, 99), 1),
            "answered": len(done), "answers_per_s": round(n / (last - started), 2)}


def bench_fanout(fake: FakeSlack, replicas: list[Replica], hosts: int) -> dict[str, Any]:
    fake.clear()
    started = time.monotonic()
    replicas[0].sender.command("/vllm-diagnose", "fleet system.os", user=ALICE, channel="C0FLEET1",
                               response_url=fake.response_url("fleet"))

    def summaries(calls: list[Any]) -> list[Any]:
        return [c for c in calls if c.method == "chat.update" and "host_verdict" in json.dumps(c.params.get("blocks"))]

    calls = fake.wait_for(lambda cs: bool(summaries(cs)), timeout=1800)
    wall = summaries(calls)[0].at - started
    return {"hosts": hosts, "wall_s": round(wall, 2)}


def run_replicas(env: dict[str, str], workdir: Path, count: int) -> list[Replica]:
    replicas = [start_replica(env, workdir, n) for n in range(count)]
    for replica in replicas:
        wait_ready(replica)
    return replicas


def stop(replicas: list[Replica]) -> None:
    for r in replicas:
        r.proc.send_signal(signal.SIGTERM)
    for r in replicas:
        try:
            r.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            r.proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    index_dir = workdir / "index"
    subprocess.run([sys.executable, "-m", "bot.cli.main", "index"], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "VLLM_DOCTOR_INDEX_DIR": str(index_dir)})
    hosts = {f"gpu-{i:03d}": (f"127.0.{1 + (i + 2) // 250}.{(i + 2) % 250 + 1}", "healthy") for i in range(args.hosts)}
    fleet = start_fleet(workdir / "fleet", hosts)
    server = start_postgres()
    fake = FakeSlack().start()
    results: dict[str, Any] = {"commands": {}, "fanout": {}}
    try:
        for count in (1, 2):
            db_url = server.create_database(f"bench{count}")
            env = replica_env(fake.base_url, db_url, index_dir, fleet,
                              VLLM_DOCTOR_RUNNER_ACCESS=json.dumps([{"hosts": ["*"], "users": [ALICE]}]),
                              VLLM_DOCTOR_LOG_FORMAT="text")
            replicas = run_replicas(env, workdir, count)
            try:
                results["commands"][count] = bench_commands(fake, replicas, args.commands)
                results["fanout"][count] = bench_fanout(fake, replicas, args.hosts)
            finally:
                stop(replicas)
    finally:
        fake.stop()
        server.stop()
        fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["fanout_ratio_1_over_2"] = round(results["fanout"][1]["wall_s"] / results["fanout"][2]["wall_s"], 2)
    results["cpus"] = os.cpu_count()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for count in (1, 2):
        c, f = results["commands"][count], results["fanout"][count]
        print(f"{count} replica(s): {c['commands']} commands: ack p50 {c['ack_p50_ms']} ms, p99 {c['ack_p99_ms']} ms, "
              f"{c['answers_per_s']} answers/s ({c['answered']} answered); {f['hosts']}-host fan-out {f['wall_s']} s")
    print(f"fan-out wall time ratio 1/2 replicas: {results['fanout_ratio_1_over_2']} ({results['cpus']} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
