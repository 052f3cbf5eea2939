"""Cold commands as whole processes (issue 29), each paired with the bare `python -c "import torch,
sentence_transformers, faiss"` of the same round (one before and one after the round's commands; the
ratio is to their mean, so a busy machine moves both), with each process's peak RSS (os.wait4), and the
warm 100 KB p50 in this process. The index and the ONNX export are made once, before the rounds.

    .venv/bin/python bench/bench_cold.py [--rounds 3] [--warm-runs 30] [--with-torch]

Commands: `explain --no-llm` of a 70 KB log, a question, `kb search`, `report-draft` of the 70 KB log,
`kb add --from-file` of a new case (on a fresh copy of the KB and index each round: the time until the
case is searchable), `serve --http` until /readyz answers 200 (Slack is the test suite's fake Web API).
`--with-torch` adds `explain` of the 70 KB log with VLLM_DOCTOR_ENCODER=torch (its own index) for scale.
Prints a markdown table: median seconds, median ratio to the bare import, max peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "slack")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BARE = [sys.executable, "-c", "import torch, sentence_transformers, faiss"]
QUESTION = "两台机器跑分布式推理，启动以后就一直不动了\n"


def make_log(size: int) -> str:
    """Real healthy start-up lines, then a real KB example error: the way real pastes look (bench_engine)."""
    import yaml

    noise = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "tests/eval/healthy").glob("*.log")))
    error = yaml.safe_load((REPO / "kb/cases/memory/kv-cache-no-memory.yaml").read_text())["examples"][0]["log"]
    body = (noise + "\n") * (size // max(1, len(noise)) + 1)
    data = (body.encode()[: size - len(error.encode()) - 1].decode(errors="ignore") + "\n" + error).encode()
    return data[:size].decode(errors="ignore")


def timed(cmd: list[str], env: dict[str, str], stdin: str | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in MB, stderr tail) of one process."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
        if stdin is not None and proc.stdin:
            proc.stdin.write(stdin.encode())
        if proc.stdin:
            proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-1500:]
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{tail}")
    return wall, usage.ru_maxrss // 1024, tail


def serve_ready(env: dict[str, str]) -> tuple[float, int, str]:
    """Seconds from starting `serve --http` until /readyz is 200; the process's peak RSS."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli.main", "serve", "--http", "--port", str(port)],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        ready = None
        while ready is None and time.perf_counter() - started < 300 and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        ready = time.perf_counter() - started
            except OSError:
                time.sleep(0.05)
        proc.terminate()
        _, _, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        tail = out.read().decode(errors="replace")[-1500:]
    if ready is None:
        sys.exit(f"serve never became ready:\n{tail}")
    return ready, usage.ru_maxrss // 1024, tail


def warm_p50(env: dict[str, str], log: str, runs: int) -> float:
    os.environ.update({k: v for k, v in env.items() if k.startswith("VLLM_DOCTOR_")})
    from bot.pipeline import Pipeline
    from bot.settings import Settings

    doctor = Pipeline.from_settings(Settings())
    doctor.match(log)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        d = doctor.match(log)
        times.append((time.perf_counter() - t) * 1000)
    assert d.best and d.best.case_id == "kv-cache-no-memory", d.best
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-runs", type=int, default=30)
    ap.add_argument("--with-torch", action="store_true")
    args = ap.parse_args()

    from fake_slack import FakeSlack
    from indexer_support import NEW_CASE_YAML  # a made-up case (test-widget-overheat) the KB lint accepts

    work = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    log70 = work / "70k.log"
    log70.write_text(make_log(70_000), encoding="utf-8")
    (work / "new-case.yaml").write_text(NEW_CASE_YAML, encoding="utf-8")
    fake = FakeSlack().start()
    base = {**os.environ, "VLLM_DOCTOR_INDEX_DIR": str(work / "index"), "VLLM_DOCTOR_ENCODER": "onnx",
            "VLLM_DOCTOR_KB_DB_PATH": str(work / "kb-growth.sqlite3"),
            "VLLM_DOCTOR_SLACK_STATE_DB": str(work / "slack.sqlite3"),
            "SLACK_BOT_TOKEN": "xoxb-bench", "SLACK_SIGNING_SECRET": "bench-secret", "SLACK_API_URL": fake.base_url,
            "VLLM_DOCTOR_HTTP_HOST": "127.0.0.1"}
    for key in ("VLLM_BASE_URL", "VLLM_DOCTOR_CONFIG"):
        base.pop(key, None)
    cli = [sys.executable, "-m", "bot.cli.main"]
    t = time.perf_counter()
    subprocess.run([*cli, "index"], cwd=REPO, env=base, check=True, capture_output=True)
    print(f"index (and ONNX export if missing): {time.perf_counter() - t:.1f} s", file=sys.stderr)
    torch_env = {**base, "VLLM_DOCTOR_ENCODER": "torch", "VLLM_DOCTOR_INDEX_DIR": str(work / "index-torch")}
    if args.with_torch:
        subprocess.run([*cli, "index"], cwd=REPO, env=torch_env, check=True, capture_output=True)

    commands: list[tuple[str, Any]] = [
        ("explain --no-llm, 70 KB log", lambda _r: timed([*cli, "explain", "--no-llm", str(log70)], base)),
        ("explain --no-llm, a question", lambda _r: timed([*cli, "explain", "--no-llm", "-"], base, QUESTION)),
        ("kb search", lambda _r: timed([*cli, "kb", "search", "NCCL watchdog timeout"], base)),
        ("report-draft, 70 KB log", lambda _r: timed([*cli, "report-draft", str(log70)], base)),
    ]

    def kb_add(round_no: int) -> tuple[float, int, str]:
        kb_dir, index_dir = work / f"kb-{round_no}", work / f"index-{round_no}"
        shutil.copytree(REPO / "kb" / "cases", kb_dir)
        shutil.copytree(work / "index", index_dir, ignore=shutil.ignore_patterns(".lock"))
        env = {**base, "VLLM_DOCTOR_KB_DIR": str(kb_dir), "VLLM_DOCTOR_INDEX_DIR": str(index_dir),
               "VLLM_DOCTOR_KB_DB_PATH": str(work / f"kb-growth-{round_no}.sqlite3")}
        result = timed([*cli, "kb", "add", "--from-file", str(work / "new-case.yaml")], env)
        check = subprocess.run([*cli, "kb", "search", "FluxCapacitorThermalTrip widget", "-k", "1"], cwd=REPO,
                               env=env, capture_output=True, text=True)
        assert "test-widget-overheat" in check.stdout, check.stdout + check.stderr
        return result

    commands.append(("kb add --from-file (until searchable)", kb_add))
    commands.append(("serve --http until /readyz 200", lambda _r: serve_ready(base)))
    if args.with_torch:
        commands.append(("explain --no-llm, 70 KB log, ENCODER=torch",
                         lambda _r: timed([*cli, "explain", "--no-llm", str(log70)], torch_env)))

    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in commands}
    bare_all: list[tuple[float, int]] = []
    for round_no in range(args.rounds):
        before = timed(BARE, base)
        walls = [(name, run(round_no)) for name, run in commands]
        after = timed(BARE, base)
        bare = (before[0] + after[0]) / 2
        bare_all += [before[:2], after[:2]]
        for name, (wall, rss, _) in walls:
            results[name].append((wall, wall / bare, rss))
        print(f"round {round_no + 1}: bare import {before[0]:.2f} / {after[0]:.2f} s", file=sys.stderr)
    fake.stop()

    warm = warm_p50(base, make_log(100_000), args.warm_runs)
    print(f"\n{args.rounds} rounds on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| cold command (whole process) | median s | median ratio to bare import | peak RSS MB (max) |")
    print("|---|---|---|---|")
    print(f"| bare `import torch, sentence_transformers, faiss` | {statistics.median(b for b, _ in bare_all):.2f} "
          f"| 1.00 | {max(r for _, r in bare_all)} |")
    for name, rows in results.items():
        print(f"| {name} | {statistics.median(w for w, _, _ in rows):.2f} | "
              f"{statistics.median(r for _, r, _ in rows):.3f} | {max(m for _, _, m in rows)} |")
    print(f"| warm diagnose 100 KB (in process), p50 of {args.warm_runs} | {warm / 1000:.3f} | | |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
