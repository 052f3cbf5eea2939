"""Accuracy of the two embedding paths side by side (issue 29): `vllm-doctor eval LABELLED --json` run once
with VLLM_DOCTOR_ENCODER=torch and once with onnx, each on its own fresh index (same KB, same folds, same
thresholds), and the held-back k-fold and blind-round rates printed as one markdown table with the
difference in points. Nothing is tuned on these numbers.

    .venv/bin/python bench/bench_encoders.py [tests/eval/dev.jsonl] [--variants clean] [--keep DIR]

The two evals run side by side (accuracy does not depend on timing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
METRICS = ("top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered")


def run_eval(encoder: str, labelled: str, index_dir: Path, extra: list[str]) -> dict[str, Any]:
    env = {**os.environ, "VLLM_DOCTOR_ENCODER": encoder, "VLLM_DOCTOR_INDEX_DIR": str(index_dir),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("VLLM_BASE_URL", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bot.cli.main", "eval", labelled, "--json", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: a floor option failed; the numbers are still printed
        sys.exit(f"eval with {encoder} failed:\n{proc.stderr[-3000:]}")
    print(f"{encoder}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def rows_of(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{"k-fold clean": {"top1": …}, …, "blind clean": {…}} from `eval --json`."""
    out: dict[str, dict[str, float]] = {}
    for variant, held in (report.get("heldback") or {}).items():
        out[f"k-fold {variant}"] = held["pooled"]
    for variant, metrics in (report.get("blind") or {}).items():
        out[f"blind {variant}"] = metrics
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("labelled", nargs="?", default="tests/eval/dev.jsonl")
    ap.add_argument("--variants", default=None, help="passed to eval (default: eval's own)")
    ap.add_argument("--keep", help="directory for the two indexes (default: a temp dir)")
    args = ap.parse_args()
    extra = ["--no-questions"] + (["--variants", args.variants] if args.variants else [])
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-encoders-"))
    with ThreadPoolExecutor(2) as pool:  # two processes, side by side: same machine conditions for both
        futures = {enc: pool.submit(run_eval, enc, args.labelled, base / enc, extra) for enc in ("torch", "onnx")}
        reports = {enc: rows_of(f.result()) for enc, f in futures.items()}
    print("| set | metric | torch | onnx | onnx − torch (points) |\n|---|---|---|---|---|")
    worst = 0.0
    for name, torch_metrics in reports["torch"].items():
        onnx_metrics = reports["onnx"].get(name, {})
        for metric in METRICS:
            if metric in torch_metrics and metric in onnx_metrics:
                a, b = float(torch_metrics[metric]), float(onnx_metrics[metric])
                diff = (b - a) * 100
                if metric in ("top1", "top3", "confident_wrong"):
                    worst = max(worst, abs(diff))
                print(f"| {name} | {metric} | {a:.3f} | {b:.3f} | {diff:+.1f} |")
    print(f"\nlargest difference on top-1 / top-3 / confident-wrong: {worst:.1f} points (target ≤ 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
