"""The labelled eval set and `vllm-doctor eval` (held-back numbers, stress variants, separation from the KB).

CI floors are set on held-back numbers (each log scored with MatchParams tuned on the other repositories), a
little under what was measured (tests/eval/README.md "Numbers"), so a KB edit that hurts generalisation is
visible but one new case does not break CI. The issue's targets are higher; the gap is reported there.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bot.diagnosis.match import MatchParams
from bot.evaluation.eval_tuning import (
    CachedMatching,
    LabelledLog,
    Metrics,
    Outcome,
    assign_folds,
    cross_validate,
    normalise_url,
    objective,
    repository,
    tune,
    with_truncated,
)
from bot.evaluation.eval_variants import StartupNoise, bury, load_warnings, partner_index, truncate
from bot.evaluation.evaluate import evaluate, labelled_logs, load_healthy, load_labelled

# The held-back evaluation encodes every paste of every variant once (~650 queries): a few minutes of CPU on an
# idle 2-core machine, much longer on a shared one, so this module gets more than the default 600 s.
pytestmark = pytest.mark.timeout(1800)

EVAL_DIR = Path(__file__).resolve().parent / "eval"
KB_DIR = Path(__file__).resolve().parent.parent / "kb" / "cases"
FOLDS = 5
# Data requirements (issue 9): dev + pending together; pending logs join dev when their cases land.
MIN_LOGS, MIN_REPOS, MIN_UNCOVERED = 300, 60, 40  # the targets (counts in tests/eval/README.md)
# Held-back floors (measured values in tests/eval/README.md, minus a margin for CPUs whose MiniLM vectors
# differ in the last bits). Session 9: 762 logs (309 + blind rounds 3 to 10, which are harder: collected with
# generic queries), 105 cases:
FLOOR_TOP1 = 0.82  # measured 0.840 (session 8, 600 logs: 0.860; session 7, 505: 0.856; 0.922 on the first 309)
FLOOR_TOP3 = 0.87  # 0.890 (445 of 500; session 8: 0.907; session 7: 0.912; 0.970 on the first 309)
MAX_CONFIDENT_WRONG = 0.03  # 0.013 (session 8: 0.007)
FLOOR_ABSTAIN = 0.95  # 0.977 (session 8: 0.995)
# Noisy: start-up warnings (the enforce-eager hint above all) neither take the answer nor make it confident:
# top-1 0.836 (drop 0.004 from clean; session 8: drop 0.007; session 7: 0.008; 0.243 before roles), confident-wrong
# 0.014 (0.200 before roles, then 0.055).
MAX_NOISY_DROP = 0.02  # the bound
MAX_NOISY_CONFIDENT_WRONG = 0.03
# Truncated: cut before the exception line of the last traceback, 124 logs (73 covered): top-3 0.740, top-1 0.562
# (session 8, 59 covered: 0.780 / 0.627; session 7, 53 covered: 0.717 / 0.434; session 5, 30 covered: 0.800 with
# frame fingerprints, 0.667 without).
FLOOR_TRUNCATED_TOP3 = 0.70
# Two failures in one paste, the earliest root error is the answer: top-1 0.724, top-3 0.846, confident-wrong
# 0.070 (0.360 before roles, then 0.117, 0.083, 0.065): a fingerprint found only after an unexplained earlier
# failure is no confident answer.
FLOOR_TWO_FAILURES_TOP1 = 0.70  # session 9: 0.724 on 500 (session 8: 0.754 on 407; session 7: 0.751 on 362)
FLOOR_TWO_FAILURES_TOP3 = 0.82  # session 9: 0.846 (session 8: 0.862; session 7: 0.862)
MAX_TWO_FAILURES_CONFIDENT_WRONG = 0.09  # session 9: 0.070 (session 8: 0.061; session 7: 0.069)


def _read(name: str) -> list[dict[str, object]]:
    path = EVAL_DIR / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _kb_ids() -> set[str]:
    return {p.stem for p in KB_DIR.glob("*/*.yaml")}


# -- the data ----------------------------------------------------------------------------------------
def test_eval_set_shape() -> None:
    dev, pending = _read("dev.jsonl"), _read("pending.jsonl")
    everything = dev + pending
    assert len(everything) >= MIN_LOGS
    assert len({repository(str(it["source"])) for it in everything}) >= MIN_REPOS
    assert sum(1 for it in dev if it["expected"] is None) >= MIN_UNCOVERED
    assert len({it["id"] for it in everything}) == len(everything), "ids must be unique across both files"
    for it in everything:
        # "label": a failure name on an uncovered log, for the team-learning replay (docs/eval-history.md)
        assert set(it) - {"label"} == {"id", "log", "expected", "source", "note"}, it["id"]
        assert "label" not in it or (it["expected"] is None and re.fullmatch(r"[a-z0-9-]+", str(it["label"]))), it["id"]
        assert str(it["log"]).strip() and str(it["source"]).startswith("https://"), it["id"]


def test_labels_are_kb_cases_and_pending_ones_are_not_yet() -> None:
    known = _kb_ids()
    unknown = [it["id"] for it in _read("dev.jsonl") if it["expected"] is not None and it["expected"] not in known]
    assert not unknown, f"dev.jsonl labels that are not KB case ids: {unknown}"
    landed = [it["id"] for it in _read("pending.jsonl") if it["expected"] in known]
    assert not landed, f"these pending logs' cases exist now: move them to dev.jsonl: {landed}"


def test_no_eval_log_comes_from_a_kb_thread() -> None:
    """Evaluating on the threads the KB was written from measures memory, not generalisation."""
    kb_urls = set()
    for path in KB_DIR.glob("*/*.yaml"):
        kb_urls |= {normalise_url(u) for u in re.findall(r"https?://[^\s'\"<>)\]]+", path.read_text(encoding="utf-8"))}
    rounds = sorted(p.name for p in Path(__file__).parent.joinpath("eval").glob("blind*.jsonl"))  # every blind round
    logs = [it for name in ["dev.jsonl", "pending.jsonl", *rounds] for it in _read(name)]
    reused = [it["id"] for it in logs if normalise_url(str(it["source"])) in kb_urls]
    assert not reused, f"eval logs taken from a thread a KB case cites: {reused}"


def test_normalise_url_makes_one_spelling_per_thread() -> None:
    a = normalise_url("https://github.com/vllm-project/vllm/pull/5714#issuecomment-1")
    assert a == normalise_url("https://GitHub.com/vllm-project/vllm/issues/5714/") == (
        "https://github.com/vllm-project/vllm/issues/5714"
    )
    assert a != normalise_url("https://github.com/vllm-project/vllm/issues/57140")
    assert repository("https://github.com/QwenLM/Qwen3/issues/12") == "qwenlm/qwen3"


# -- folds and tuning (plumbing, no encoder) ---------------------------------------------------------
def _log(i: int, repo: str, expected: str | None = "x") -> LabelledLog:
    return LabelledLog(f"id{i}", f"log {i}", expected, f"https://github.com/{repo}/issues/{i}", repo)


def test_folds_keep_each_repository_whole_and_are_balanced() -> None:
    items = [_log(i, f"o/r{i % 7}") for i in range(70)] + [_log(100 + i, "big/repo") for i in range(30)]
    folds = assign_folds(items, 4)
    by_repo: dict[str, set[int]] = {}
    for it, f in zip(items, folds, strict=True):
        by_repo.setdefault(it.repo, set()).add(f)
    assert all(len(fs) == 1 for fs in by_repo.values())
    sizes = [folds.count(f) for f in set(folds)]
    assert len(sizes) == 4 and max(sizes) - min(sizes) <= 30
    assert assign_folds(items, 4) == folds  # deterministic


def test_metrics_count_what_they_say() -> None:
    rows = [
        Outcome("a", ("a", "b"), "match"),
        Outcome("a", ("b", "a"), "uncertain"),
        Outcome("a", ("b",), "match"),  # confident and wrong
        Outcome(None, ("c",), "uncertain"),  # uncovered, abstained
        Outcome(None, ("c",), "match"),  # uncovered, confident and wrong
    ]
    m = Metrics.of(rows)
    assert (m.n_covered, m.n_uncovered) == (3, 2)
    assert m.top1 == pytest.approx(1 / 3, abs=1e-3) and m.top3 == pytest.approx(2 / 3, abs=1e-3)
    assert m.confident_wrong == pytest.approx(2 / 5) and m.abstain_uncovered == 0.5
    assert m.match_covered == pytest.approx(2 / 3, abs=1e-3)


# -- stress variants ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def noise() -> StartupNoise:
    healthy = tuple(tuple(lines) for lines in load_healthy(EVAL_DIR / "healthy"))
    return StartupNoise(healthy, load_warnings(EVAL_DIR / "startup_warnings.txt"))


def test_noisy_variant_buries_the_log_in_300_to_1200_lines_with_real_warnings(noise: StartupNoise) -> None:
    assert len(noise.warnings) >= 5
    log = "ValueError: No available memory for the cache blocks."
    sizes = []
    for key in ("a", "b", "c", "d"):
        paste = bury(log, noise, key)
        lines = paste.splitlines()
        sizes.append(len(lines))
        assert 300 <= len(lines) <= 1200 + 40
        assert log in lines
        assert "enforce-eager is enabled" in paste  # the warning that used to flip answers is always there
        assert all(any(w in lines for w in group) for group in noise.warnings)
        assert bury(log, noise, key) == paste  # deterministic per log id
    assert len(set(sizes)) > 1


def test_truncated_variant_cuts_before_the_exception_line_of_the_last_traceback() -> None:
    tb = 'INFO start\nTraceback (most recent call last):\n  File "a.py", line 1, in f\n    raise RuntimeError(x)\n'
    assert truncate(tb + "RuntimeError: x\nINFO shutting down") == tb.rstrip("\n")  # frames and code line remain
    # Behind a logger prefix and caret marks; a wrapper name without "Error" still closes the traceback.
    prefixed = 'ERROR 01-12 08:36:38 [core.py:390]   File "b.py", line 2, in g\nERROR 01-12 08:36:38 [core.py:390]     f()\n[rank0]:  ^^^^\n'
    assert truncate(prefixed + "ERROR 01-12 08:36:38 [core.py:390] torch._dynamo.exc.BackendCompilerFailed: x") == prefixed.rstrip("\n")
    assert truncate("ValueError: only the error") is None  # no frame: nothing would be left to diagnose from
    assert truncate("no exception here") is None
    assert truncate(tb) is None  # already cut inside its traceback: that is a clean log already


def test_two_failures_pairs_a_different_cause_from_another_repository() -> None:
    labels = ["a", "a", "b", "c", None]
    groups = ["r1", "r1", "r1", "r2", "r3"]
    for i in range(len(labels)):
        j = partner_index(i, labels, groups)
        assert j is not None and labels[j] != labels[i] and groups[j] != groups[i]


# -- the held-back evaluation (real encoder, real KB) ----------------------------------------------
@pytest.fixture(scope="module")
def items() -> list[LabelledLog]:
    return labelled_logs(load_labelled(EVAL_DIR / "dev.jsonl"))


@pytest.fixture(scope="module")
def report(doctor, items, noise):
    return evaluate(doctor, items, noise, k=FOLDS)


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_held_back_numbers_meet_the_floors(report) -> None:
    clean = report.variants["clean"].pooled
    assert clean.top1 >= FLOOR_TOP1, clean
    assert clean.top3 >= FLOOR_TOP3, clean
    assert clean.confident_wrong <= MAX_CONFIDENT_WRONG, clean
    assert clean.abstain_uncovered >= FLOOR_ABSTAIN, clean


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_noisy_variant_stays_close_to_clean(report) -> None:
    clean, noisy = report.variants["clean"].pooled, report.variants["noisy"].pooled
    assert noisy.top1 >= clean.top1 - MAX_NOISY_DROP, (clean, noisy)
    assert noisy.confident_wrong <= MAX_NOISY_CONFIDENT_WRONG, noisy


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_truncated_and_two_failure_variants(report) -> None:
    assert report.variants["truncated"].pooled.top3 >= FLOOR_TRUNCATED_TOP3, report.variants["truncated"].pooled
    two = report.variants["two-failures"].pooled
    assert two.top1 >= FLOOR_TWO_FAILURES_TOP1, two
    assert two.top3 >= FLOOR_TWO_FAILURES_TOP3, two
    assert two.confident_wrong <= MAX_TWO_FAILURES_CONFIDENT_WRONG, two


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_each_fold_reports_the_tuning_gap(report) -> None:
    assert len(report.folds) == FOLDS
    clean = report.variants["clean"].pooled
    assert sum(f.heldback.n_covered + f.heldback.n_uncovered for f in report.folds) == clean.n_covered + clean.n_uncovered
    gap = report.gap()
    assert set(gap) >= {"top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered"}


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_hybrid_beats_each_single_retriever(report) -> None:
    top1 = {name: m.top1 for name, m in report.retrievers}
    assert top1["hybrid"] > top1["bm25"]
    assert top1["hybrid"] > top1["dense"]


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_tuning_never_sees_the_held_back_labels(report, items) -> None:
    """Scrambling the labels of one fold's logs must not change the params tuned for that fold."""
    matching = report.matching
    assert isinstance(matching, CachedMatching)
    folds, fold_of, _ = cross_validate(matching, items, FOLDS)
    target = folds[0].fold
    scrambled = [replace(it, expected=None) if f == target else it for it, f in zip(items, fold_of, strict=True)]
    again, _, _ = cross_validate(matching, scrambled, FOLDS)
    assert again[0].params == folds[0].params
    # ... while the training logs do drive the tuning: tuning on the held-back fold alone differs or scores it higher.
    held = [it for it, f in zip(items, fold_of, strict=True) if f == target]
    tuned_on_held = tune(matching, held)
    own = Metrics.of(matching.outcome(it.log, it.expected, tuned_on_held) for it in held)
    assert own.top1 >= folds[0].heldback.top1


@pytest.mark.slow  # the grouped k-fold over every labelled log (minutes)
def test_shipped_match_params_are_as_good_as_tuning_on_all_logs(report, items) -> None:
    """Users get MatchParams(): they must be what the tuning procedure finds on every labelled log (within a
    margin for CPUs whose MiniLM vectors differ in the last bits), so the held-back numbers, which score the same
    procedure on folds it did not see, measure the shipped matcher."""
    matching = report.matching
    assert isinstance(matching, CachedMatching)

    tuning_set = with_truncated(items)  # what cross_validate tunes on: the logs and their cut tracebacks

    def score(params: MatchParams) -> float:
        return objective(Metrics.of(matching.outcome(it.log, it.expected, params) for it in tuning_set))

    tuned = tune(matching, tuning_set)
    assert score(MatchParams()) >= score(tuned) - 0.01, (tuned, score(tuned), score(MatchParams()))


_LABEL_FILES = sorted(p.name for p in Path(__file__).parent.joinpath("eval").glob("root_labels*.jsonl"))


@pytest.mark.parametrize("name", _LABEL_FILES)
def test_root_label_files_name_real_lines_of_their_logs(name: str) -> None:
    """Every root-line label (first or second labeller, every round) points at a line of a log it labels."""
    from bot.models import COMPONENTS

    logs = {it["id"]: it for p in Path(__file__).parent.joinpath("eval").glob("*.jsonl")
            if not p.name.startswith("root_labels") for it in _read(p.name) if "log" in it}
    rows = _read(name)
    assert rows and len({r["id"] for r in rows}) == len(rows), f"{name}: empty or duplicate ids"
    for r in rows:
        assert set(r) == {"id", "root_line", "root_text", "component"}, (name, r["id"])
        assert r["id"] in logs and r["component"] in COMPONENTS, (name, r["id"])
        lines = str(logs[r["id"]]["log"]).split("\n")
        if r["root_line"] is None:
            assert r["root_text"] is None, (name, r["id"])
        else:
            line_no = r["root_line"]
            assert isinstance(line_no, int) and 1 <= line_no <= len(lines), (name, r["id"])
            assert lines[line_no - 1].strip() == r["root_text"], (name, r["id"])


@pytest.mark.parametrize("round_no", [13, 14, 15, 16])
def test_blind_rounds_pass_their_collection_checks(round_no: int) -> None:
    """tests/eval/check_blind.py: ids, labels, thread reuse, repository caps, written share, one root label per log."""
    spec = importlib.util.spec_from_file_location("check_blind", Path(__file__).parent / "eval" / "check_blind.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    errors, counts = module.check(round_no)
    assert errors == [] and 36 <= counts["logs"] <= 50, errors
