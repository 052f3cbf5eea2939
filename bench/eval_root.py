"""Root line and component accuracy (issue 25): `python bench/eval_root.py [--labels FILE] [--logs FILE ...]`.

With tests/eval/root_labels.jsonl ({"id", "root_line": int|null, "root_text", "component"} per labelled log;
the logs themselves are read from the eval sets by id) it scores, over the real pipeline (real KB, MiniLM):

- root line: right when the answer's root line is the labelled one (or, where the label says no line states the
  cause, when the answer has no root); the target is over logs that state their cause (root_line not null);
- component: the answer's component against the label, split by whether the log is covered by a case.

Without labels it says so and scores a proxy only (`--proxy`): on logs whose expected case is known, the
component the root-line rules alone give (as if no case covered the log) against the expected case's component
(kb/triage/components.yaml). The proxy says nothing about the root line itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EVAL = REPO / "tests" / "eval"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} = {n / d:.3f}" if d else "0/0"


def score_labels(pipeline, labels: list[dict], logs: dict[str, dict], errors: bool,
                 second: dict[str, dict] | None = None) -> dict:
    line_ok = line_n = none_ok = none_n = 0
    either: Counter[str] = Counter()
    comp: Counter[str] = Counter()
    misses: list[str] = []
    for label in labels:
        item = logs.get(label["id"])
        if item is None:
            continue
        d = pipeline.match(item["log"])
        root = d.root
        covered = item.get("expected") is not None
        if label.get("root_line") is None:
            none_n += 1
            none_ok += root is None
            if root is not None:
                misses.append(f"{label['id']}: line {root.line} vs none")
            continue  # no root line, so no component: the contract carries the component on the root
        else:
            line_n += 1
            ok = root is not None and root.line == label["root_line"]
            line_ok += ok
            if not ok:
                misses.append(f"{label['id']}: line {root.line if root else None} vs {label['root_line']}")
        if label.get("component"):
            key = "covered" if covered else "uncovered"
            comp[f"{key}_n"] += 1
            got = root.component if root is not None else None
            if got == label["component"]:
                comp[f"{key}_ok"] += 1
            else:
                misses.append(f"{label['id']}: component {got} vs {label['component']}")
            if second is not None and label["id"] in second:  # right by either of two independent labellers
                either[f"{key}_n"] += 1
                either[f"{key}_ok"] += got in (label["component"], second[label["id"]]["component"])
    out = {
        "root_line": _pct(line_ok, line_n), "no_root_when_none_stated": _pct(none_ok, none_n),
        "component": _pct(comp["covered_ok"] + comp["uncovered_ok"], comp["covered_n"] + comp["uncovered_n"]),
        "component_covered": _pct(comp["covered_ok"], comp["covered_n"]),
        "component_uncovered": _pct(comp["uncovered_ok"], comp["uncovered_n"]),
    }
    if second is not None:
        out["component_either_labeller"] = _pct(either["covered_ok"] + either["uncovered_ok"],
                                                either["covered_n"] + either["uncovered_n"])
        out["component_either_labeller_uncovered"] = _pct(either["uncovered_ok"], either["uncovered_n"])
    if errors:
        out["misses"] = misses
    return out


def score_proxy(pipeline, items: list[dict], errors: bool) -> dict:
    from bot.diagnosis.root import case_component, read_root

    by_id = pipeline.kb.by_id()
    ok = n = no_root = 0
    misses = []
    for item in items:
        expected = item.get("expected")
        if expected is None or expected not in by_id:
            continue
        distilled, facts = pipeline.distil(item["log"])
        reading = read_root(distilled, facts, "unknown", ())  # the rules alone, as if no case covered it
        n += 1
        want = case_component(expected, by_id[expected].area)
        if reading.root is None:
            no_root += 1
            misses.append(f"{item['id']}: no root, want {want}")
            continue
        if reading.root.component == want:
            ok += 1
        else:
            misses.append(f"{item['id']}: {reading.root.component} vs {want} <- {reading.root.text[:140]}")
    out = {"component_by_rules_vs_expected_case": _pct(ok, n), "no_root": no_root}
    if errors:
        out["misses"] = misses
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", default=str(EVAL / "root_labels.jsonl"))
    parser.add_argument("--logs", nargs="*", default=[str(EVAL / "dev.jsonl"), str(EVAL / "blind.jsonl")],
                        help="eval sets holding the logs")
    parser.add_argument("--second", nargs="*", help="a second labeller's files: also score the component as right "
                        "when it matches either labeller (tests/eval/root_labels_second_*.jsonl)")
    parser.add_argument("--proxy", action="store_true", help="score the component proxy on the logs' expected cases")
    parser.add_argument("--limit", type=int, default=0, help="at most this many logs (0: all)")
    parser.add_argument("--errors", action="store_true", help="list every miss")
    parser.add_argument("--half", choices=["tune", "test"], help="only the logs of one half (stable hash of the id): "
                        "rules are tuned on the misses of 'tune'; 'test' is the held-back measure")
    args = parser.parse_args(argv)

    from bot.pipeline import Pipeline

    items = [item for path in args.logs for item in _read_jsonl(Path(path))]
    if args.half:
        items = [i for i in items if (zlib.crc32(i["id"].encode()) % 2 == 0) == (args.half == "tune")]
    if args.limit:
        items = items[: args.limit]
    pipeline = Pipeline.from_settings()
    report: dict = {}
    labels_path = Path(args.labels)
    if labels_path.exists():
        second = {r["id"]: r for p in args.second for r in _read_jsonl(Path(p))} if args.second else None
        report["labels"] = score_labels(pipeline, _read_jsonl(labels_path), {i["id"]: i for i in items}, args.errors,
                                        second)
    else:
        report["labels"] = f"no labels at {labels_path}: root-line accuracy not measured"
    if args.proxy or not labels_path.exists():
        report["proxy"] = score_proxy(pipeline, items, args.errors)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
