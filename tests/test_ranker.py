"""The learned ranker (bot/diagnosis/ranker.py, bot/evaluation/ranker_train.py): artifact loading and fallbacks, bad training
files, training reproducibility on a subset, the exported trees agreeing with scikit-learn, and the shipped
artifact doing its job on the real engine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bot.diagnosis.match import Matcher
from bot.diagnosis.ranker import DEFAULT_ARTIFACT, BoundRanker, LearnedRanker, RankerError, case_hash, load_for_kb
from bot.errors import UserInputError
from bot.evaluation.eval_tuning import CachedMatching, Metrics, assign_folds
from bot.evaluation.evaluate import labelled_logs, load_labelled
from bot.evaluation.ranker_train import _export, _fit_gbm, _matrix, collect, fit, outcomes, validate
from kb.loader import load_kb

REPO = Path(__file__).resolve().parent.parent
DEV = REPO / "tests" / "eval" / "dev.jsonl"
SUBSET = 160  # logs of dev.jsonl used for the reproducibility test (every 4th, deterministic)


@pytest.fixture(scope="module")
def kb():
    return load_kb()


@pytest.fixture(scope="module")
def subset(doctor):
    rows = load_labelled(DEV)[::4][:SUBSET]
    items = validate(rows, doctor.kb, DEV)
    matching = CachedMatching(doctor.kb, doctor.index, doctor.distil)
    return matching, items, collect(matching, doctor.kb, items)


# -- artifact loading: never a crash --------------------------------------------------------------------
def test_missing_artifact_gives_the_fixed_ranking_and_one_warning_line(tmp_path, kb) -> None:
    ranker, warning = load_for_kb(tmp_path / "nope.json", kb.cases)
    assert ranker is None
    assert warning is not None and "\n" not in warning and "vllm-doctor train" in warning


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": 1}', '{"format": 99, "features": []}'])
def test_unreadable_or_foreign_artifact_is_refused_in_one_line(tmp_path, kb, text: str) -> None:
    path = tmp_path / "ranker.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RankerError):
        LearnedRanker.load(path)
    ranker, warning = load_for_kb(path, kb.cases)
    assert ranker is None and warning is not None and "\n" not in warning


def test_a_case_edited_after_training_keeps_the_fixed_score(kb) -> None:
    model = LearnedRanker.load(DEFAULT_ARTIFACT)
    edited = kb.cases[0].model_copy(update={"title": kb.cases[0].title + " (edited)"})
    cases = [edited, *kb.cases[1:]]
    assert model.stale_cases(cases)[:1] == [edited.id] or edited.id in model.stale_cases(cases)
    bound = BoundRanker.for_kb(model, cases)
    assert edited.id not in bound.known
    assert case_hash(edited) != case_hash(kb.cases[0])


def test_the_shipped_artifact_knows_the_bundled_kb_and_is_small(kb) -> None:
    assert DEFAULT_ARTIFACT.stat().st_size < 20 * 1024 * 1024
    model = LearnedRanker.load(DEFAULT_ARTIFACT)
    stale = model.stale_cases(kb.cases)
    # a KB change without retraining only sends the changed cases to the fixed score; retrain when this fails
    assert len(stale) <= 0.1 * len(kb.cases), f"retrain the ranker (`vllm-doctor train`): stale {stale[:5]}"
    assert 0.0 < model.p_uncertain < model.p_match <= 1.0


# -- training input: the whole file or nothing ---------------------------------------------------------
@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([{"id": "a", "log": "x", "expected": "no-such-case-id"}], "row 1 (a) is labelled 'no-such-case-id'"),
        ([{"id": "a", "log": "x", "expected": None}, {"id": "a", "log": "y", "expected": None}], "row 2 repeats id 'a'"),
        ([{"id": "a", "log": "x", "expected": None}, {"id": "b", "log": "  \n", "expected": None}], "row 2 (b) has an empty log"),
    ],
)
def test_a_bad_training_row_is_named_in_one_line(kb, rows, says: str) -> None:
    with pytest.raises(UserInputError) as err:
        validate(rows, kb, Path("train.jsonl"))
    assert says in str(err.value) and "\n" not in str(err.value)


# -- training ---------------------------------------------------------------------------------------------
def test_exported_trees_give_scikit_learns_decision_function(subset) -> None:
    _, _, rows = subset
    x, y = _matrix(rows, [*json.loads(DEFAULT_ARTIFACT.read_text())["features"]])
    model = _fit_gbm(x, y, 7)
    intercept, trees = _export(model)
    ours = LearnedRanker.from_json({
        **json.loads(DEFAULT_ARTIFACT.read_text()), "intercept": intercept, "trees": trees,
        "coef": [0.0] * x.shape[1], "mean": [0.0] * x.shape[1], "scale": [1.0] * x.shape[1],
    })
    want = model.decision_function(x[:200])
    got = np.array([ours.raw(list(v)) for v in x[:200]])
    assert np.allclose(got, want, atol=1e-4)


def test_training_reproduces_on_a_subset_and_beats_the_fixed_fusion_held_back(doctor, subset) -> None:
    """Two runs with one seed give the same artifact (tolerance 1e-9 on every number); trained on half the
    subset's repositories, the other half's top-1 is at least the fixed fusion's, minus 0.05."""
    matching, items, rows = subset
    a = fit(rows, items, doctor.kb, seed=3)
    b = fit(rows, items, doctor.kb, seed=3)
    assert a["trees"] == b["trees"] and a["iso_x"] == b["iso_x"]
    assert a["p_match"] == pytest.approx(b["p_match"], abs=1e-9)
    folds = assign_folds(items, 2)
    train = [r for r in rows if folds[r.item] == 0]
    held = [it for it, f in zip(items, folds, strict=True) if f == 1]
    model = BoundRanker.for_kb(LearnedRanker.from_json(fit(train, items, doctor.kb, seed=3)), doctor.kb.cases)
    learned = Metrics.of(outcomes(matching, doctor.kb, held, model))
    fixed = Metrics.of(outcomes(matching, doctor.kb, held, None))
    assert learned.top1 >= fixed.top1 - 0.05
    # Not asserted: confident-wrong. On the merged pipeline of session 10 the learned ranker said `match` wrongly
    # more often than the fixed fusion on this half (0.0875 vs 0.0125), which is why VLLM_DOCTOR_RANKER
    # defaults to fixed (docs/matching.md); test_the_setting_selects_learned_or_fixed… holds that default.


def test_the_matcher_with_the_shipped_ranker_ranks_a_kb_example_first(doctor) -> None:
    ranker, _ = load_for_kb(DEFAULT_ARTIFACT, doctor.kb.cases)
    assert ranker is not None
    matcher = Matcher(doctor.kb, doctor.index, ranker=ranker)
    case = next(c for c in doctor.kb.cases if c.id == "rope-scaling-transformers-too-old") if any(
        c.id == "rope-scaling-transformers-too-old" for c in doctor.kb.cases) else doctor.kb.cases[0]
    distilled, facts = doctor.distil(case.examples[0].log)
    ranking = matcher.rank(distilled, "hybrid", facts)
    assert ranking.matches and ranking.matches[0].case_id == case.id
    assert "fixed_score" in ranking.matches[0].scores  # the learned score replaced the fused one


def test_blind_file_is_not_what_the_shipped_ranker_was_trained_on() -> None:
    data = json.loads(DEFAULT_ARTIFACT.read_text())
    n_dev = len(labelled_logs(load_labelled(DEV)))
    assert data["trained_on"]["logs"] <= n_dev


def test_the_setting_selects_learned_or_fixed_and_a_missing_artifact_warns(settings, tmp_path, caplog) -> None:
    from bot.pipeline import Pipeline
    from bot.settings import Settings

    assert Settings().ranker == "fixed"  # the default until the learned ranker beats it held-back
    learned = Pipeline.from_settings(settings.model_copy(update={"ranker": "learned"}))
    assert learned.matcher.ranker is not None
    fixed = Pipeline.from_settings(settings.model_copy(update={"ranker": "fixed"}))
    assert fixed.matcher.ranker is None
    missing = Pipeline.from_settings(settings.model_copy(update={"ranker": "learned", "ranker_path": tmp_path / "gone.json"}))
    with caplog.at_level("WARNING"):
        assert missing.matcher.ranker is None
    assert any("fixed ranking used" in r.getMessage() for r in caplog.records)
