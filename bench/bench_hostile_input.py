"""Hostile and odd input at the command line (issue 28): exit status, peak memory (GNU time's maximum
resident set size), and whether a traceback reached the user, for devices, endless pipes, NUL padding,
byte order marks, a 100,000-deep JSON batch line, closed stdin and a 50 MB log.

    .venv/bin/python bench/bench_hostile_input.py [--index-dir DIR]

Needs /usr/bin/time (GNU). Each case is one `vllm-doctor` process; the engine loads where the input gets
that far, so the memory includes torch and MiniLM (~0.6-0.9 GB) for those cases.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KV = "ERROR 12-01 10:00:11 [core.py:708] ValueError: No available memory for the cache blocks. Try increasing " \
     "`gpu_memory_utilization` when initializing the engine."


def _cases(tmp: Path) -> list[tuple[str, str]]:
    big = tmp / "50mb.log"
    with big.open("w", encoding="utf-8") as out:
        line = "INFO 12-01 10:00:00 [loader.py:1] loading shard 1 of 8 for model Qwen/Qwen2.5-7B-Instruct\n"
        out.write(line * (50_000_000 // len(line)))
        out.write(KV + "\n")
    nul = tmp / "rotated.log"
    nul.write_bytes(b"\0" * 4096 + KV.encode() + b"\n")
    bom = tmp / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "log": KV}).encode() + b"\n"
                    + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    c1 = tmp / "c1.log"
    c1.write_text("ERROR \x9b31mred\x9b0m HF_TOKEN=hf_" + "a1" * 17 + "\n" + KV + "\n", encoding="utf-8")
    doctor = f"{sys.executable} -m bot"
    return [
        ("explain /dev/zero", f"{doctor} explain --no-llm /dev/zero"),
        ("explain - < /dev/urandom", f"{doctor} explain --no-llm - < /dev/urandom"),
        ("explain --jsonl /dev/zero", f"{doctor} explain --no-llm --jsonl /dev/zero"),
        ("report-draft /dev/zero", f"{doctor} report-draft /dev/zero"),
        ("kb add --from-file /dev/zero", f"{doctor} kb add --from-file /dev/zero"),
        ("explain <&- (closed stdin)", f"{doctor} explain --no-llm <&-"),
        ("explain 50 MB log (over the 32 MiB limit)", f"{doctor} explain --no-llm {big}"),
        ("explain 4 KB NUL padding + log", f"{doctor} explain --no-llm --json {nul}"),
        ("explain C1 controls + token", f"{doctor} explain --no-llm --json {c1}"),
        ("--jsonl BOM + 100,000-deep array", f"{doctor} explain --no-llm --jsonl {bom}"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index-dir", help="reuse a built index (VLLM_DOCTOR_INDEX_DIR)")
    args = parser.parse_args()
    env = dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_DOCTOR_KB_DB=tempfile.mktemp(suffix=".db"))
    if args.index_dir:
        env["VLLM_DOCTOR_INDEX_DIR"] = args.index_dir
    print("| case | exit | peak RSS (MB) | traceback | first stderr line |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, command in _cases(Path(tmp)):
            proc = subprocess.run(["/usr/bin/time", "-v", "bash", "-c", f"timeout 300 {command}"], cwd=ROOT, env=env,
                                  capture_output=True, text=True, errors="replace", check=False)
            rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
            user_err = [ln for ln in proc.stderr.splitlines() if not ln.startswith("\t") and "Command" not in ln]
            first = (user_err[0] if user_err else proc.stdout.splitlines()[0] if proc.stdout else "")[:110]
            print(f"| {name} | {proc.returncode} | {int(rss.group(1)) / 1024:.0f} | "
                  f"{'YES' if 'Traceback' in proc.stderr + proc.stdout else 'no'} | {first.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
