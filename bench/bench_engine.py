"""Core-engine benchmark: warm KB-only diagnosis latency at 1 KB / 100 KB / 10 MB, 10 MB distillation and
fact reading, and cold `vllm-doctor explain` on a 100 KB log (a fresh process: imports + model load + index
load), also as a ratio to importing torch + loading the embedding model in a fresh process of the same run
(so a busy or slow machine does not move the number).

    .venv/bin/python bench/bench_engine.py [--runs N] [--cold-runs N]

Logs are built from the real healthy start-up log(s) in tests/eval/healthy/ with a real KB example
error at the end, the way real pastes look. Prints a markdown table.
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
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def make_log(size: int, noise: str, error: str) -> str:
    reps = max(0, (size - len(error)) // (len(noise) + 1))
    body = ((noise + "\n") * (reps + 1))[: max(0, size - len(error) - 1)]
    return body + "\n" + error


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cold-runs", type=int, default=3)
    args = ap.parse_args()

    from bot.diagnosis.distill import decode_input, distill
    from bot.diagnosis.facts import read_facts
    from bot.pipeline import Pipeline
    from bot.settings import Settings

    noise = "\n".join(p.read_text() for p in sorted((REPO / "tests/eval/healthy").glob("*.log")))
    doctor = Pipeline.from_settings(Settings())
    error = doctor.case("kv-cache-no-memory").examples[0].log
    t = time.perf_counter()
    _ = doctor.matcher
    print(f"warm-up (index open/build + model load): {time.perf_counter() - t:.2f} s", file=sys.stderr)

    rows = []
    for label, size, runs in (
        ("1 KB", 1_000, args.runs),
        ("100 KB", 100_000, args.runs),
        ("10 MB", 10_000_000, 5),
    ):
        log = make_log(size, noise, error)
        doctor.match(log)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            d = doctor.match(log)
            times.append((time.perf_counter() - t) * 1000)
        assert d.best and d.best.case_id == "kv-cache-no-memory", d.best
        rows.append((f"diagnose {label} (warm, KB-only)", statistics.median(times), pct(times, 0.95), "ms"))

    log = make_log(10_000_000, noise, error)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        distill(decode_input(log.encode(), 64 << 20))
        times.append(time.perf_counter() - t)
    rows.append(("decode + redact + distill 10 MB", statistics.median(times), pct(times, 0.95), "s"))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        paste = decode_input(log.encode(), 64 << 20)
        distill(paste)
        read_facts(paste.text)
        times.append(time.perf_counter() - t)
    rows.append(("decode + redact + distill + facts 10 MB", statistics.median(times), pct(times, 0.95), "s"))

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(make_log(100_000, noise, error))
    cold, base = [], []
    load_model = "from indexer.encoder import SentenceTransformerEncoder as E; E(None).encode(['x'])"
    for _ in range(args.cold_runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bot.cli.main", "explain", "--no-llm", "--json", f.name], check=True,
                       capture_output=True, cwd=REPO)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", load_model], check=True, capture_output=True, cwd=REPO)
        base.append(time.perf_counter() - t)
    rows.append(("cold `vllm-doctor explain` 100 KB", statistics.median(cold), max(cold), "s"))
    rows.append(("fresh process: import torch + load MiniLM", statistics.median(base), max(base), "s"))
    ratios = [c / b for c, b in zip(cold, base, strict=True)]
    rows.append(("cold explain / (torch + MiniLM)", statistics.median(ratios), max(ratios), "ratio"))

    print("| measurement | p50 | p95 / max | unit |\n|---|---|---|---|")
    for name, p50, p95, unit in rows:
        print(f"| {name} | {p50:.3f} | {p95:.3f} | {unit} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
