"""Score one blind round with the shipped matcher (MatchParams(), the default ranking), in parts.

    .venv/bin/python bench/score_blind.py tests/eval/blind12.jsonl [--errors]

A blind round is labelled and committed before its first run and scored once (tests/eval/README.md); this prints
the figures `vllm-doctor eval` prints for blind.jsonl, for the whole round and for its thread part and written part
(ids `b12-w-…`: logs written around exact error strings from the real source) apart. Nothing is tuned here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.evaluation.eval_tuning import CachedMatching  # noqa: E402
from bot.evaluation.evaluate import _check_labels, labelled_logs, load_labelled, score_blind  # noqa: E402
from bot.pipeline import Pipeline  # noqa: E402

COLUMNS = ("top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labelled", type=Path)
    ap.add_argument("--errors", action="store_true", help="list every miss")
    args = ap.parse_args()
    doctor = Pipeline.from_settings()
    items = labelled_logs(load_labelled(args.labelled))
    _check_labels(doctor, items)
    matching = CachedMatching(doctor.kb, doctor.index, doctor.distil)
    written = re.compile(r"^b\d+-w-")
    parts = {
        "all": items,
        "thread part": [it for it in items if not written.match(it.id)],
        "written part": [it for it in items if written.match(it.id)],
    }
    print(f"| {args.labelled.name} | logs (covered) | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for name, part in parts.items():
        if not part:
            continue
        [result] = score_blind(matching, part, None, ["clean"])
        m = result.metrics.as_dict()
        covered = sum(1 for it in part if it.expected)
        cells = " | ".join(f"{float(m[c]):.3f}" for c in COLUMNS)
        print(f"| {name} | {len(part)} ({covered}) | {cells} |")
        if args.errors and name == "all":
            for miss in result.misses:
                print("  miss: " + miss, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
