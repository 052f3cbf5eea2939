"""Stress check of the explain flow's verdicts on tests/eval/dev.jsonl (hybrid mode only).

Variants of every labelled log:
  clean      the log as labelled
  warned     real start-up warnings (enforce-eager, FP8 scaling factors, tokenizer, deprecation, NCCL INFO)
             inserted before the log: an advisory must not take over the answer
  noisy      buried in healthy start-up output (as `vllm-doctor eval` does)
  truncated  covered logs that end in a traceback, cut just before the final exception line

Reports top-1, top-3, confident-wrong, abstain on uncovered, and the share of `match` verdicts on covered
logs. Not a tuning target: the dev set is what the thresholds were calibrated on (docs/matching.md).

    python bench/bench_diagnosis_stress.py [--labelled tests/eval/dev.jsonl] [--misses]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bot.errors import UserInputError  # noqa: E402
from bot.evaluation.evaluate import bury, load_healthy, load_labelled  # noqa: E402
from bot.pipeline import Pipeline  # noqa: E402

# Real lines printed by ordinary vLLM start-ups (vllm-project/vllm issues #14025, #5104, #16141 and the
# bundled healthy logs): none of them is a failure.
WARNINGS = [
    "WARNING 03-05 18:05:41 cuda.py:95] To see benefits of async output processing, enable CUDA graph. Since, "
    "enforce-eager is enabled, async output processor cannot be used",
    "WARNING 05-29 10:26:04 fp8.py:51] Using FP8 KV cache but no scaling factors provided. Defaulting to "
    "scaling factors of 1.0. This may lead to less accurate results!",
    "WARNING 03-11 02:55:27 tokenizer.py:64] Using a slow tokenizer. This might cause a significant slowdown. "
    "Consider using a fast tokenizer instead.",
    "WARNING 11-18 18:07:21 arg_utils.py:1075] [DEPRECATED] Block manager v1 has been removed, and setting "
    "--use-v2-block-manager to True or False has no effect on vLLM behavior.",
    "node-1:1234:1234 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
    "INFO 04-24 16:33:13 [kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 4.84x",
]
_EXCEPTION = re.compile(r"^\S*\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b")


@dataclass
class Tally:
    covered: int = 0
    uncovered: int = 0
    top1: int = 0
    top3: int = 0
    wrong: int = 0
    abstain: int = 0
    matched_covered: int = 0
    misses: list[str] = field(default_factory=list)

    def row(self, name: str) -> str:
        c, total = max(self.covered, 1), max(self.covered + self.uncovered, 1)
        abstain = f"{self.abstain / self.uncovered:.3f}" if self.uncovered else "-"
        return (f"| {name} | {self.covered}/{self.uncovered} | {self.top1 / c:.3f} | {self.top3 / c:.3f} | "
                f"{self.wrong / total:.3f} | {abstain} | {self.matched_covered / c:.3f} |")


def truncate(log: str) -> str | None:
    """The log cut just before its last exception line, when that line ends a traceback."""
    lines = log.rstrip("\n").split("\n")
    if not any("Traceback (most recent call last)" in ln for ln in lines):
        return None
    for i in range(len(lines) - 1, 0, -1):
        if _EXCEPTION.match(lines[i].strip()) and lines[i - 1].startswith((" ", "\t")):
            return "\n".join(lines[:i])
    return None


def run(doctor: Pipeline, items: list[dict[str, object]], variant: str, healthy: list[list[str]]) -> Tally:
    t = Tally()
    for i, it in enumerate(items):
        log, expected = str(it["log"]), it["expected"]
        if variant == "warned":
            log = "\n".join(WARNINGS) + "\n" + log
        elif variant == "noisy":
            log = bury(log, healthy, i)
        elif variant == "truncated":
            cut = truncate(log) if expected else None
            if cut is None:
                continue
            log = cut
        try:
            d = doctor.match(log)
        except UserInputError:
            continue
        ids = [m.case_id for m in d.matches]
        best = ids[0] if ids else None
        if expected:
            t.covered += 1
            t.top1 += best == expected
            t.top3 += expected in ids[:3]
            t.matched_covered += d.verdict == "match" and best == expected
        else:
            t.uncovered += 1
            t.abstain += d.verdict != "match"
        if d.verdict == "match" and best != expected:
            t.wrong += 1
        if best != expected:
            t.misses.append(f"{variant} {it.get('id')}: expected {expected}, got {best} ({d.verdict})")
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--labelled", default=str(REPO / "tests" / "eval" / "dev.jsonl"))
    p.add_argument("--variants", default="clean,warned,noisy,truncated")
    p.add_argument("--misses", action="store_true")
    args = p.parse_args()
    items = load_labelled(Path(args.labelled))
    healthy = load_healthy(Path(args.labelled).parent / "healthy")
    doctor = Pipeline.from_settings()
    print("| variant | covered/uncovered | top-1 | top-3 | confident-wrong | abstain (uncovered) | correct match (covered) |")
    print("|---|---|---|---|---|---|---|")
    for variant in args.variants.split(","):
        t = run(doctor, items, variant, healthy)
        print(t.row(variant), flush=True)
        if args.misses:
            for m in t.misses:
                print("   ", m, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
