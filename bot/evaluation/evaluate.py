"""`vllm-doctor eval`: how well diagnosis generalises to logs it was not tuned on (docs/matching.md).

The labelled logs are split by source repository (grouped k-fold, bot/evaluation/eval_tuning.py): MatchParams are
tuned on the training folds only and each log is scored with the params tuned without its repository.
Reported per variant (bot/evaluation/eval_variants.py: clean, noisy, truncated, two-failures): the pooled held-back
metrics and their spread over the folds, then the gap between tuning and held-back numbers, then the
single retrievers (hybrid / rrf / bm25 / dense) with the untuned default params for comparison. A blind
round beside the labelled file (blind.jsonl: logs collected after tuning) is scored apart, with the shipped
params.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.diagnosis.match import Fusion, MatchParams, Mode
from bot.errors import UserInputError
from bot.evaluation.eval_tuning import (
    METRIC_NAMES,
    AdaptedIndex,
    CachedMatching,
    FoldResult,
    LabelledLog,
    Metrics,
    Outcome,
    Spread,
    adapter_trained_on,
    cross_validate,
    repository,
    spread,
)
from bot.evaluation.eval_variants import StartupNoise, bury, load_warnings, partner_index, truncate, two_failures

if TYPE_CHECKING:
    from bot.pipeline import Pipeline

VARIANTS = ("clean", "noisy", "truncated", "two-failures")
RETRIEVERS: tuple[tuple[str, Mode, Fusion], ...] = (
    ("hybrid", "hybrid", "weighted"),
    ("hybrid-rrf", "hybrid", "rrf"),
    ("bm25", "bm25", "weighted"),
    ("dense", "dense", "weighted"),
)
DEFAULT_FOLDS = 5
WARNINGS_FILE = "startup_warnings.txt"
# Logs collected after the matcher was tuned, labelled and committed before their first run: scored with the
# shipped MatchParams only, never tuned on, never folded into the k-fold set (tests/eval/README.md "Blind round").
BLIND_FILE = "blind.jsonl"


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


def labelled_logs(items: Sequence[dict[str, Any]]) -> list[LabelledLog]:
    out = []
    for n, it in enumerate(items, 1):
        source = str(it.get("source") or "")
        out.append(
            LabelledLog(
                id=str(it.get("id") or f"line-{n}"),
                log=it["log"],
                expected=it["expected"] or None,
                source=source,
                repo=str(it.get("repo") or repository(source)) if source or it.get("repo") else f"unknown-{n}",
            )
        )
    return out


def load_healthy(directory: Path) -> list[list[str]]:
    logs = [p.read_text(encoding="utf-8", errors="replace").splitlines() for p in sorted(directory.glob("*.log"))]
    return [lines for lines in logs if lines]


@dataclass(frozen=True)
class VariantResult:
    variant: str
    pooled: Metrics  # every held-back log of this variant together
    per_fold: dict[str, Spread]  # metric → mean / stdev / range over the folds
    misses: tuple[str, ...]


@dataclass
class EvalReport:
    k: int
    n_repos: int
    folds: list[FoldResult]
    variants: dict[str, VariantResult] = field(default_factory=dict)
    retrievers: list[tuple[str, Metrics]] = field(default_factory=list)  # clean, untuned defaults
    sweep_outcomes: list[Outcome] = field(default_factory=list)  # clean held-back, for the threshold sweep
    matching: CachedMatching | None = None  # the caches, so a caller can re-score without re-encoding
    adapter_off: int = 0  # logs of this file the query adapter was trained on (then it is off for the whole run)

    def gap(self) -> dict[str, tuple[float, float, float]]:
        """metric → (mean over folds on the tuning part, mean on the held-back part, tuning - held-back)."""
        out = {}
        for name in METRIC_NAMES:
            tuned = spread([f.tuning.value(name) for f in self.folds]).mean
            held = spread([f.heldback.value(name) for f in self.folds]).mean
            out[name] = (tuned, held, round(tuned - held, 4))
        return out


def _variant_logs(items: Sequence[LabelledLog], variant: str, noise: StartupNoise | None) -> list[str | None]:
    """The paste per item for a variant (None: the variant does not apply to that log)."""
    if variant == "clean":
        return [it.log for it in items]
    if variant == "noisy":
        if noise is None:
            raise UserInputError("the noisy variant needs healthy start-up logs")
        return [bury(it.log, noise, it.id) for it in items]
    if variant == "truncated":
        return [truncate(it.log) for it in items]
    if variant == "two-failures":
        labels = [it.expected for it in items]
        groups = [it.repo for it in items]
        out: list[str | None] = []
        for i, it in enumerate(items):
            j = partner_index(i, labels, groups) if it.expected else None  # an uncovered first failure: skip
            out.append(two_failures(it.log, items[j].log) if j is not None else None)
        return out
    raise UserInputError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def _check_labels(doctor: Pipeline, items: Sequence[LabelledLog]) -> None:
    known = set(doctor.kb.by_id())
    unknown_labels = sorted({it.expected for it in items if it.expected and it.expected not in known})
    if unknown_labels:
        raise UserInputError(f"labels not in the KB: {', '.join(unknown_labels)}")


def evaluate(
    doctor: Pipeline,
    items: Sequence[LabelledLog],
    noise: StartupNoise | None,
    k: int = DEFAULT_FOLDS,
    variants: Sequence[str] = VARIANTS,
    retrievers: bool = True,
) -> EvalReport:
    _check_labels(doctor, items)
    if not items:
        raise UserInputError("no labelled logs")
    # the shipped query adapter was trained on dev's logs: scored with it they would report its training fit
    seen = adapter_trained_on(doctor.index, items)
    matching = CachedMatching(doctor.kb, AdaptedIndex(doctor.index, "none") if seen else doctor.index, doctor.distil)
    folds, fold_of, params_of = cross_validate(matching, items, k)
    report = EvalReport(k=len(folds), n_repos=len({it.repo for it in items}), folds=folds, matching=matching,
                        adapter_off=seen)
    for variant in variants:
        logs = _variant_logs(items, variant, noise)
        by_fold: dict[int, list[Outcome]] = {}
        pooled: list[Outcome] = []
        misses = []
        for it, log, f, params in zip(items, logs, fold_of, params_of, strict=True):
            if log is None:
                continue
            o = matching.outcome(log, it.expected, params)
            pooled.append(o)
            by_fold.setdefault(f, []).append(o)
            if (miss := _miss(it, o)) is not None:
                misses.append(miss)
        fold_metrics = [Metrics.of(os_) for _, os_ in sorted(by_fold.items())]
        report.variants[variant] = VariantResult(
            variant,
            Metrics.of(pooled),
            {name: spread([m.value(name) for m in fold_metrics]) for name in METRIC_NAMES},
            tuple(misses),
        )
        if variant == "clean":
            report.sweep_outcomes = pooled
    if retrievers:
        defaults = MatchParams()
        for name, mode, fusion in RETRIEVERS:
            outcomes = [matching.outcome(it.log, it.expected, defaults, mode, fusion) for it in items]
            report.retrievers.append((name, Metrics.of(outcomes)))
    return report


def _miss(it: LabelledLog, o: Outcome) -> str | None:
    best = o.ranked[0] if o.ranked else None
    if it.expected and best != it.expected:
        return f"{it.id}: expected {it.expected}, got {best} ({o.verdict})"
    if not it.expected and o.verdict == "match":
        return f"{it.id}: uncovered but matched {best}"
    return None


@dataclass(frozen=True)
class BlindResult:
    variant: str
    metrics: Metrics
    misses: tuple[str, ...]


def score_blind(
    matching: CachedMatching, items: Sequence[LabelledLog], noise: StartupNoise | None, variants: Sequence[str]
) -> list[BlindResult]:
    """The blind round, per variant, with the shipped MatchParams: what a new user's logs get today."""
    params = MatchParams()
    out = []
    for variant in variants:
        outcomes, misses = [], []
        for it, log in zip(items, _variant_logs(items, variant, noise), strict=True):
            if log is None:
                continue
            o = matching.outcome(log, it.expected, params)
            outcomes.append(o)
            if (miss := _miss(it, o)) is not None:
                misses.append(miss)
        out.append(BlindResult(variant, Metrics.of(outcomes), tuple(misses)))
    return out


# -- output -------------------------------------------------------------------------------------------
_LABELS = {
    "top1": "top-1",
    "top3": "top-3",
    "confident_wrong": "confident-wrong",
    "abstain_uncovered": "abstain (uncovered)",
    "match_covered": "match (covered)",
}


def format_report(report: EvalReport) -> str:
    rows = [
        f"query adapter off for this run: it was trained on {report.adapter_off} of these logs (its held-back "
        "effect: `vllm-doctor train FILE --kfold`)",
    ] if report.adapter_off else []
    rows += [
        f"held-back: grouped {report.k}-fold over {report.n_repos} source repositories "
        "(MatchParams tuned on the other folds); pooled value (fold mean ± stdev)",
        "| variant | covered | uncovered | " + " | ".join(_LABELS[m] for m in METRIC_NAMES) + " |",
        "|---|---|---|" + "---|" * len(METRIC_NAMES),
    ]
    for v in report.variants.values():
        cells = [f"{v.pooled.value(m):.3f} ({v.per_fold[m].mean:.2f}±{v.per_fold[m].stdev:.2f})" for m in METRIC_NAMES]
        rows.append(f"| {v.variant} | {v.pooled.n_covered} | {v.pooled.n_uncovered} | " + " | ".join(cells) + " |")
    rows += ["", "tuning vs held-back (clean, mean over folds)", "| metric | tuning | held-back | gap |", "|---|---|---|---|"]
    for name, (tuned, held, gap) in report.gap().items():
        rows.append(f"| {_LABELS[name]} | {tuned:.3f} | {held:.3f} | {gap:+.3f} |")
    if report.retrievers:
        rows += [
            "",
            "single retrievers (clean, all logs, untuned default MatchParams: not held-back numbers)",
            "| mode | " + " | ".join(_LABELS[m] for m in METRIC_NAMES) + " |",
            "|---|" + "---|" * len(METRIC_NAMES),
        ]
        for name, m in report.retrievers:
            rows.append(f"| {name} | " + " | ".join(f"{m.value(x):.3f}" for x in METRIC_NAMES) + " |")
    rows.append("\nparams tuned per fold (held-back repositories):")
    defaults = asdict(MatchParams())
    for f in report.folds:
        changed = {k: v for k, v in asdict(f.params).items() if defaults.get(k) != v}
        rows.append(f"  fold {f.fold} ({len(f.repos)} repos, {f.heldback.n_covered + f.heldback.n_uncovered} logs): "
                    + (", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"))
    return "\n".join(rows)


def report_json(report: EvalReport) -> dict[str, Any]:
    return {
        "k": report.k,
        "repositories": report.n_repos,
        "query_adapter_off": report.adapter_off,
        "heldback": {
            name: {"pooled": v.pooled.as_dict(), "folds": {m: asdict(s) for m, s in v.per_fold.items()}}
            for name, v in report.variants.items()
        },
        "gap": {m: {"tuning": t, "heldback": h, "gap": g} for m, (t, h, g) in report.gap().items()},
        "folds": [
            {"fold": f.fold, "repos": list(f.repos), "params": asdict(f.params),
             "tuning": f.tuning.as_dict(), "heldback": f.heldback.as_dict()}
            for f in report.folds
        ],
        "retrievers": [{"mode": name, **m.as_dict()} for name, m in report.retrievers],
    }


def format_blind(results: Sequence[BlindResult], n_logs: int, n_repos: int) -> str:
    rows = [
        f"\nblind round ({BLIND_FILE}: {n_logs} logs from {n_repos} repositories, collected after tuning, "
        "scored with the shipped MatchParams, never tuned on)",
        "| variant | covered | uncovered | " + " | ".join(_LABELS[m] for m in METRIC_NAMES) + " |",
        "|---|---|---|" + "---|" * len(METRIC_NAMES),
    ]
    for r in results:
        cells = [f"{r.metrics.value(m):.3f}" for m in METRIC_NAMES]
        rows.append(f"| {r.variant} | {r.metrics.n_covered} | {r.metrics.n_uncovered} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sweep(outcomes: Sequence[Outcome], thresholds: tuple[float, ...] = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85)) -> str:
    """How the 'match' threshold trades answered-and-right against confident-wrong (held-back scores)."""
    total = len(outcomes) or 1
    covered = sum(1 for o in outcomes if o.expected) or 1
    rows = ["\nthreshold sweep (clean, held-back scores): a 'match' at score >= t",
            "| t | correct matches (of covered) | confident-wrong (of all) |", "|---|---|---|"]
    for t in thresholds:
        right = sum(1 for o in outcomes if o.score >= t and o.expected and o.ranked[:1] == (o.expected,))
        wrong = sum(1 for o in outcomes if o.score >= t and o.ranked[:1] != (o.expected,))
        rows.append(f"| {t:.2f} | {right / covered:.3f} | {wrong / total:.3f} |")
    return "\n".join(rows)


def run_eval(args: argparse.Namespace, doctor: Pipeline) -> int:
    path = Path(args.labelled)
    if not path.is_file():
        raise UserInputError(f"no such file: {path}")
    items = labelled_logs(load_labelled(path))
    variants = [v.strip() for v in (args.variants or ",".join(VARIANTS)).split(",") if v.strip()]
    if args.no_noisy:
        variants = [v for v in variants if v != "noisy"]
    if "clean" not in variants:
        variants.insert(0, "clean")
    noise = None
    if "noisy" in variants:
        healthy_dir = Path(args.healthy_dir) if args.healthy_dir else path.parent / "healthy"
        healthy = load_healthy(healthy_dir) if healthy_dir.is_dir() else []
        if not healthy:
            raise UserInputError(f"no healthy start-up logs (*.log) in {healthy_dir}; pass --no-noisy to skip")
        warnings_file = Path(args.warnings) if args.warnings else path.parent / WARNINGS_FILE
        warnings = load_warnings(warnings_file) if warnings_file.is_file() else ()
        noise = StartupNoise(tuple(tuple(h) for h in healthy), warnings)
    if args.folds < 2:
        raise UserInputError("--folds must be at least 2")
    report = evaluate(doctor, items, noise, k=args.folds, variants=variants)
    blind_path = path.parent / BLIND_FILE
    blind_items = labelled_logs(load_labelled(blind_path)) if blind_path.is_file() and blind_path != path else []
    _check_labels(doctor, blind_items)
    blind = score_blind(report.matching, blind_items, noise, variants) if blind_items and report.matching else []
    if args.json:
        out = report_json(report)
        if blind:
            out["blind"] = {r.variant: r.metrics.as_dict() for r in blind}
        print(json.dumps(out, indent=2))
    else:
        print(format_report(report))
        if blind:
            print(format_blind(blind, len(blind_items), len({it.repo for it in blind_items})))
    if getattr(args, "sweep", False):
        print(sweep(report.sweep_outcomes))
    if args.errors:
        for name, misses in [(f"{v.variant} held-back", v.misses) for v in report.variants.values()] + [
            (f"blind {r.variant}", r.misses) for r in blind
        ]:
            if misses:
                print(f"\n{name} misses:", file=sys.stderr)
                for miss in misses:
                    print("  " + miss, file=sys.stderr)
    _score_question_set(args, path, doctor)
    return _check_floors(args, report)


def _score_question_set(args: argparse.Namespace, labelled: Path, doctor: Any) -> None:
    """Hook: the question set (bot/evaluation/question_eval.py) beside the logs, unless --no-questions."""
    if getattr(args, "no_questions", False):
        return
    given = getattr(args, "questions", None)
    path = Path(given) if given else labelled.parent / "questions.jsonl"
    if not path.is_file():
        if given:
            raise UserInputError(f"no such file: {path}")
        return
    from bot.evaluation.question_eval import format_question_table, load_questions, score_questions

    scores = score_questions(doctor, load_questions(path))
    blind = labelled.parent / "questions_blind.jsonl"
    if not given and blind.is_file():  # written after the matcher was tuned: its own rows, the honest figures
        scores += [s for s in score_questions(doctor, load_questions(blind)) if s.split != "all"]
    if args.json:
        print(json.dumps([s.row() for s in scores], indent=2))
    else:
        print(f"\nQuestions without a log ({path.name}; split 'blind': questions_blind.jsonl):")
        print(format_question_table(scores))
    if args.errors:
        for s in scores:
            if s.group == "all" and s.split == "all" and s.misses:
                print("\nquestion misses:", file=sys.stderr)
                for miss in s.misses:
                    print("  " + miss, file=sys.stderr)


def _check_floors(args: argparse.Namespace, report: EvalReport) -> int:
    """Floors apply to the held-back clean and noisy numbers."""
    failures = []
    for name in ("clean", "noisy"):
        v = report.variants.get(name)
        if v is None:
            continue
        m = v.pooled
        if args.floor_top1 is not None and m.top1 < args.floor_top1:
            failures.append(f"{name} top-1 {m.top1:.3f} < floor {args.floor_top1}")
        if args.max_confident_wrong is not None and m.confident_wrong > args.max_confident_wrong:
            failures.append(f"{name} confident-wrong {m.confident_wrong:.3f} > {args.max_confident_wrong}")
        if args.floor_abstain is not None and m.abstain_uncovered < args.floor_abstain:
            failures.append(f"{name} abstain {m.abstain_uncovered:.3f} < floor {args.floor_abstain}")
    for f in failures:
        print(f"eval below floor: {f}", file=sys.stderr)
    return 1 if failures else 0
