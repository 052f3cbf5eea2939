"""How often two labellers agree on the root line and the component (issue 25): the ceiling for the bot.

    .venv/bin/python bench/label_agreement.py [FIRST.jsonl ...] --second SECOND.jsonl

Defaults: the first labels of blind rounds 13-16 (tests/eval/root_labels_blind1[3-6].jsonl, made by the helpers who
collected each round) against tests/eval/root_labels_second_*.jsonl (other helpers, who saw only the logs' ids and
text). Covered/uncovered split by the rounds' `expected`. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EVAL = Path(__file__).resolve().parents[1] / "tests" / "eval"


def _rows(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in (json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip())}


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} = {n / d:.3f}" if d else "0/0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rounds = (13, 14, 15, 16)
    parser.add_argument("first", nargs="*", default=[str(EVAL / f"root_labels_blind{n}.jsonl") for n in rounds])
    seconds = sorted(EVAL.glob("root_labels_second_*.jsonl"))
    parser.add_argument("--second", nargs="*", default=[str(p) for p in seconds])
    parser.add_argument("--logs", nargs="*", default=[str(EVAL / f"blind{n}.jsonl") for n in rounds])
    args = parser.parse_args(argv)
    first = {k: v for p in args.first for k, v in _rows(Path(p)).items()}
    second = {k: v for p in args.second for k, v in _rows(Path(p)).items()}
    expected = {k: v.get("expected") for p in args.logs for k, v in _rows(Path(p)).items()}
    ids = sorted(set(first) & set(second))
    if not ids:
        print("error: the two label files share no id", file=sys.stderr)
        return 2
    stated = [i for i in ids if first[i]["root_line"] is not None]
    same_comp = [i for i in ids if first[i]["component"] == second[i]["component"]]
    covered = [i for i in ids if expected.get(i)]
    uncovered = [i for i in ids if not expected.get(i)]
    out = {
        "logs": len(ids),
        "root_line": _pct(sum(first[i]["root_line"] == second[i]["root_line"] for i in stated), len(stated)),
        "component": _pct(len(same_comp), len(ids)),
        "component_covered": _pct(sum(i in same_comp for i in covered), len(covered)),
        "component_uncovered": _pct(sum(i in same_comp for i in uncovered), len(uncovered)),
        "component_disagreements": [f"{i}: {first[i]['component']} vs {second[i]['component']}"
                                    for i in ids if i not in same_comp],
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
