"""`vllm-doctor eval`: retrieval quality on a labelled set, hybrid vs BM25-only vs dense-only, clean and noisy.

Metrics (covered = logs whose expected case is in the KB; uncovered = expected null):
  top1 / top3        expected case ranked first / in the first three (covered logs)
  confident_wrong    verdict "match" but the best case is not the expected one (all logs)
  abstain_uncovered  verdict is not "match" on uncovered logs (the bot did not claim a cause)
The noisy variant buries every log in hundreds of lines of healthy vLLM start-up output.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import UserInputError

MODES = ("hybrid", "hybrid-rrf", "bm25", "dense")  # hybrid = weighted fusion (the default)
NOISE_LINES_BEFORE = 300
NOISE_LINES_AFTER = 40


@dataclass
class Result:
    mode: str
    variant: str
    n_covered: int = 0
    n_uncovered: int = 0
    top1: int = 0
    top3: int = 0
    confident_wrong: int = 0
    abstained_uncovered: int = 0
    misses: list[str] = field(default_factory=list)
    # (best score, best is expected, log is covered) per log: for the threshold sweep
    outcomes: list[tuple[float, bool, bool]] = field(default_factory=list)

    def metrics(self) -> dict[str, float | int | str]:
        total = self.n_covered + self.n_uncovered
        return {
            "mode": self.mode,
            "variant": self.variant,
            "covered": self.n_covered,
            "uncovered": self.n_uncovered,
            "top1": round(self.top1 / self.n_covered, 4) if self.n_covered else 0.0,
            "top3": round(self.top3 / self.n_covered, 4) if self.n_covered else 0.0,
            "confident_wrong": round(self.confident_wrong / total, 4) if total else 0.0,
            "abstain_uncovered": round(self.abstained_uncovered / self.n_uncovered, 4) if self.n_uncovered else 0.0,
        }


def load_labelled(path: Path) -> list[dict[str, Any]]:
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserInputError(f"{path}:{n}: invalid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("log"), str) or "expected" not in obj:
            raise UserInputError(f'{path}:{n}: need an object with "log" and "expected"')
        items.append(obj)
    return items


def load_healthy(directory: Path) -> list[list[str]]:
    logs = [p.read_text(encoding="utf-8", errors="replace").splitlines() for p in sorted(directory.glob("*.log"))]
    return [lines for lines in logs if lines]


def bury(log: str, healthy: list[list[str]], i: int) -> str:
    """The log placed after ~300 lines of real healthy start-up output (repeated if short), with a
    tail of start-up lines after it, the way a real 100 KB paste looks."""
    source = healthy[i % len(healthy)]
    before = (source * (NOISE_LINES_BEFORE // max(len(source), 1) + 1))[:NOISE_LINES_BEFORE]
    after = source[-NOISE_LINES_AFTER:]
    return "\n".join([*before, log, *after])


def evaluate(doctor: Any, items: list[dict[str, Any]], healthy: list[list[str]] | None) -> list[Result]:
    known = set(doctor.kb.by_id())
    unknown_labels = sorted({it["expected"] for it in items if it["expected"] and it["expected"] not in known})
    if unknown_labels:
        raise UserInputError(f"labels not in the KB: {', '.join(unknown_labels)}")
    variants = [("clean", None)] + ([("noisy", healthy)] if healthy else [])
    results = []
    for variant, noise in variants:
        for mode in MODES:
            r = Result(mode, variant)
            matcher = doctor.matcher
            saved_fusion = matcher.fusion
            matcher.fusion = "rrf" if mode == "hybrid-rrf" else saved_fusion
            search_mode = "hybrid" if mode.startswith("hybrid") else mode
            for i, it in enumerate(items):
                log = bury(it["log"], noise, i) if noise else it["log"]
                expected = it["expected"]
                try:
                    d = doctor.match(log, mode=search_mode)
                    ids = [m.case_id for m in d.matches]
                    verdict = d.verdict
                except UserInputError:
                    ids, verdict = [], "unknown"
                best = ids[0] if ids else None
                r.outcomes.append((d.matches[0].score if ids else 0.0, best == expected, bool(expected)))
                if expected:
                    r.n_covered += 1
                    r.top1 += best == expected
                    r.top3 += expected in ids[:3]
                    if best != expected:
                        r.misses.append(f"{it.get('id')}: expected {expected}, got {best} ({verdict})")
                else:
                    r.n_uncovered += 1
                    r.abstained_uncovered += verdict != "match"
                    if verdict == "match":
                        r.misses.append(f"{it.get('id')}: uncovered but matched {best}")
                if verdict == "match" and best != expected:
                    r.confident_wrong += 1
            matcher.fusion = saved_fusion
            results.append(r)
    return results


def sweep(result: Result, thresholds: tuple[float, ...] = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85)) -> str:
    """How the 'match' threshold trades answered-and-right against confident-wrong (calibration)."""
    total = len(result.outcomes) or 1
    covered = sum(1 for _, _, cov in result.outcomes if cov) or 1
    rows = [f"\nthreshold sweep ({result.variant} {result.mode}): a 'match' at score >= t",
            "| t | correct matches (of covered) | confident-wrong (of all) |", "|---|---|---|"]
    for t in thresholds:
        right = sum(1 for s, ok, cov in result.outcomes if s >= t and ok and cov)
        wrong = sum(1 for s, ok, _ in result.outcomes if s >= t and not ok)
        rows.append(f"| {t:.2f} | {right / covered:.3f} | {wrong / total:.3f} |")
    return "\n".join(rows)


def format_table(results: list[Result]) -> str:
    rows = ["| variant | mode | top-1 | top-3 | confident-wrong | abstain (uncovered) |", "|---|---|---|---|---|---|"]
    for r in results:
        m = r.metrics()
        rows.append(
            f"| {m['variant']} | {m['mode']} | {m['top1']:.3f} | {m['top3']:.3f} | "
            f"{m['confident_wrong']:.3f} | {m['abstain_uncovered']:.3f} |"
        )
    first = results[0].metrics()
    rows.append(f"\n{first['covered']} covered logs, {first['uncovered']} uncovered logs")
    return "\n".join(rows)


def run_eval(args: argparse.Namespace, doctor: Any) -> int:
    path = Path(args.labelled)
    if not path.is_file():
        raise UserInputError(f"no such file: {path}")
    items = load_labelled(path)
    healthy = None
    if not args.no_noisy:
        healthy_dir = Path(args.healthy_dir) if args.healthy_dir else path.parent / "healthy"
        healthy = load_healthy(healthy_dir) if healthy_dir.is_dir() else None
        if not healthy:
            raise UserInputError(f"no healthy start-up logs (*.log) in {healthy_dir}; pass --no-noisy to skip")
    results = evaluate(doctor, items, healthy)
    if args.json:
        print(json.dumps([r.metrics() for r in results], indent=2))
    else:
        print(format_table(results))
    if getattr(args, "sweep", False):
        for r in results:
            if r.mode == "hybrid":
                print(sweep(r))
    if args.errors:
        for r in results:
            if r.mode == "hybrid" and r.misses:
                print(f"\n{r.variant} hybrid misses:", file=sys.stderr)
                for miss in r.misses:
                    print("  " + miss, file=sys.stderr)
    return _check_floors(args, results)


def _check_floors(args: argparse.Namespace, results: list[Result]) -> int:
    failures = []
    for r in results:
        if r.mode != "hybrid":
            continue
        m = r.metrics()
        if args.floor_top1 is not None and m["top1"] < args.floor_top1:
            failures.append(f"{r.variant} top-1 {m['top1']:.3f} < floor {args.floor_top1}")
        if args.max_confident_wrong is not None and m["confident_wrong"] > args.max_confident_wrong:
            failures.append(f"{r.variant} confident-wrong {m['confident_wrong']:.3f} > {args.max_confident_wrong}")
        if args.floor_abstain is not None and m["abstain_uncovered"] < args.floor_abstain:
            failures.append(f"{r.variant} abstain {m['abstain_uncovered']:.3f} < floor {args.floor_abstain}")
    for f in failures:
        print(f"eval below floor: {f}", file=sys.stderr)
    return 1 if failures else 0
