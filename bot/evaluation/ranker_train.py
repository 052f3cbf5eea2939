"""`vllm-doctor train`: fit the learned ranker (bot/diagnosis/ranker.py) on labelled logs, and measure it held-back.

Rows are (paste, candidate case) pairs that the matcher offers under the shipped MatchParams, labelled 1 when
the candidate is the log's expected case. A gradient-boosted tree model (scikit-learn, seeded, exported to
JSON) scores them; its raw output is calibrated by isotonic regression on out-of-fold predictions (grouped by
source repository inside the training set), and the probability where `match` reaches TARGET_PRECISION on
those held-back predictions becomes the match threshold of the matcher's score scale.

`--kfold` measures it honestly: grouped k-fold over repositories (bot/eval_tuning.assign_folds), each fold
scored by a ranker trained and calibrated on the other folds only, beside ablations (signatures only,
+ BM25, + dense, fixed fusion, learned fusion).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.isotonic import IsotonicRegression

from bot.diagnosis.match import Matcher, MatchParams
from bot.diagnosis.ranker import (
    ARTIFACT_FORMAT,
    DEFAULT_ARTIFACT,
    FEATURES,
    BoundRanker,
    Candidate,
    LearnedRanker,
    PasteContext,
    case_hash,
    features,
    kb_hash,
)
from bot.errors import UserInputError
from bot.evaluation.eval_tuning import AdaptedIndex, CachedMatching, LabelledLog, Metrics, Outcome, assign_folds
from bot.evaluation.evaluate import labelled_logs, load_labelled
from indexer.query_adapter import DEFAULT_ARTIFACT as ADAPTER_ARTIFACT
from indexer.query_adapter import DEFAULT_LAMBDA, DEFAULT_STEPS, QueryAdapter, case_set_hash
from indexer.query_adapter import train as train_query_adapter
from kb.loader import KnowledgeBase

if TYPE_CHECKING:
    from bot.pipeline import Pipeline
    from indexer.index import KBIndex

TARGET_PRECISION = 0.97
P_UNCERTAIN = 0.25
DEFAULT_SEED = 26
INNER_FOLDS = 3
GBM = {"n_estimators": 60, "max_depth": 3, "learning_rate": 0.15, "subsample": 0.8, "min_samples_leaf": 5}
SIGNATURE_FEATURES = (
    "strong", "signature", "sig_root", "sig_quiet", "unexplained", "earliest", "frames", "fact_rule",
    "version_penalty", "first_hit", "role_cause", "role_symptom", "role_advisory", "n_signature", "n_candidates",
    "truncated", "log_lines", "n_roots", "quiet_only",
)
ABLATIONS: dict[str, tuple[str, ...]] = {
    "signatures only": SIGNATURE_FEATURES,
    "+ BM25": (*SIGNATURE_FEATURES, "bm25_log", "bm25_rel", "rank_bm25", "gap_bm25"),
    "+ dense": (*SIGNATURE_FEATURES, "bm25_log", "bm25_rel", "rank_bm25", "gap_bm25", "dense", "rank_dense",
                "gap_dense", "plain_text"),
    "learned fusion": FEATURES,
}


class _Recorder:
    """A Rescorer that keeps what the matcher offers and changes nothing."""

    def __init__(self) -> None:
        self.last: tuple[list[Candidate], PasteContext] | None = None

    def rescore(
        self, cands: Sequence[Candidate], ctx: PasteContext, match: float, uncertain: float
    ) -> list[float | None]:
        self.last = (list(cands), ctx)
        return [None] * len(cands)


@dataclass(frozen=True)
class Row:
    """One labelled paste: its candidates (features and ids) under the shipped params."""

    item: int
    case_ids: tuple[str, ...]
    x: tuple[tuple[float, ...], ...]
    labels: tuple[int, ...]


def validate(items: Sequence[dict[str, Any]], kb: KnowledgeBase, path: Path) -> list[LabelledLog]:
    """Refuse the whole file on the first bad row (one line naming it): nothing is trained on half a file."""
    known = set(kb.by_id())
    seen: dict[str, int] = {}
    for n, it in enumerate(items, 1):
        ident = str(it.get("id") or "")
        if not ident:
            raise UserInputError(f"{path}: row {n} has no id")
        if ident in seen:
            raise UserInputError(f"{path}: row {n} repeats id {ident!r} (first on row {seen[ident]})")
        seen[ident] = n
        if not str(it.get("log") or "").strip():
            raise UserInputError(f"{path}: row {n} ({ident}) has an empty log")
        expected = it.get("expected")
        if expected is not None and not isinstance(expected, str):
            raise UserInputError(f"{path}: row {n} ({ident}): expected must be a case id or null")
        if expected and expected not in known:
            raise UserInputError(
                f"{path}: row {n} ({ident}) is labelled {expected!r}, which is no case in the KB (deleted or misspelt)"
            )
    return labelled_logs(items)


def collect(matching: CachedMatching, kb: KnowledgeBase, items: Sequence[LabelledLog],
            params: MatchParams | None = None) -> list[Row]:
    recorder = _Recorder()
    matcher = Matcher(kb, matching.index, params=params or MatchParams(), ranker=recorder)
    rows = []
    for i, it in enumerate(items):
        prepared = matching.distilled(it.log)
        recorder.last = None
        if prepared is not None:
            distilled, facts = prepared
            matcher.rank(distilled, "hybrid", facts)
        if recorder.last is None:
            rows.append(Row(i, (), (), ()))
            continue
        cands, ctx = recorder.last
        x = features(cands, ctx)
        rows.append(Row(i, tuple(c.case_id for c in cands), tuple(tuple(v) for v in x),
                        tuple(int(c.case_id == it.expected) for c in cands)))
    return rows


def _matrix(rows: Sequence[Row], used: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    keep = np.array([name in used for name in FEATURES], dtype=float)
    xs = [list(v) for r in rows for v in r.x]
    ys = [y for r in rows for y in r.labels]
    x = np.asarray(xs, dtype=float).reshape(-1, len(FEATURES)) * keep
    return x, np.asarray(ys, dtype=int)


def _fit_gbm(x: np.ndarray, y: np.ndarray, seed: int) -> GradientBoostingClassifier:
    model = GradientBoostingClassifier(random_state=seed, **GBM)
    model.fit(x, y)
    return model


def _export(model: GradientBoostingClassifier) -> tuple[float, list[dict[str, list[float]]]]:
    intercept = float(model._raw_predict_init(np.zeros((1, len(FEATURES))))[0, 0])
    trees = []
    for est in model.estimators_[:, 0]:
        t = est.tree_
        tree: dict[str, list[float]] = {
            "left": [int(v) for v in t.children_left], "right": [int(v) for v in t.children_right],
            "feature": [int(v) for v in t.feature], "threshold": [round(float(v), 6) for v in t.threshold],
            "value": [round(float(v), 6) for v in t.value[:, 0, 0]],
        }
        trees.append(tree)
    return intercept, trees


def _top_decisions(rows: Sequence[Row], raw: np.ndarray, items: Sequence[LabelledLog]) -> list[tuple[float, bool]]:
    """Per paste: the best candidate's raw output and whether it is the expected case (uncovered: never)."""
    out, k = [], 0
    for r in rows:
        n = len(r.case_ids)
        if n:
            j = int(np.argmax(raw[k:k + n]))
            out.append((float(raw[k + j]), r.case_ids[j] == items[r.item].expected))
        k += n
    return out


def fit(rows: Sequence[Row], items: Sequence[LabelledLog], kb: KnowledgeBase, seed: int = DEFAULT_SEED,
        used: Sequence[str] = FEATURES) -> dict[str, Any]:
    """Train on these rows: the model, its isotonic calibration on out-of-fold outputs (grouped by repository
    inside this set), and the match threshold at TARGET_PRECISION. Returns the JSON artifact."""
    rows = [r for r in rows if r.case_ids]
    x, y = _matrix(rows, used)
    if len(set(y.tolist())) < 2:
        raise UserInputError("training needs labelled logs whose expected case the matcher finds, and others")
    sub = [items[r.item] for r in rows]
    folds = assign_folds(sub, INNER_FOLDS)
    row_fold = np.asarray([f for r, f in zip(rows, folds, strict=True) for _ in r.case_ids])
    oof = np.zeros(len(y))
    for f in sorted(set(folds)):
        train = row_fold != f
        if len(set(y[train].tolist())) < 2:
            continue
        oof[~train] = _fit_gbm(x[train], y[train], seed).decision_function(x[~train])
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(oof, y)
    # The match threshold: the lowest calibrated probability at which the out-of-fold best answers reach the
    # target precision (every answer at or above it counted).
    tops = sorted(((float(iso.predict([raw])[0]), ok) for raw, ok in _top_decisions(rows, oof, items)), reverse=True)
    p_match, right, total = 1.0, 0, 0
    for p, ok in tops:
        right, total = right + int(ok), total + 1
        if right / total >= TARGET_PRECISION:
            p_match = p
    p_match = max(p_match, P_UNCERTAIN + 0.01)
    model = _fit_gbm(x, y, seed)
    intercept, trees = _export(model)
    return {
        "format": ARTIFACT_FORMAT,
        "features": list(FEATURES),
        "used": list(used),
        "kb_version": kb_hash(kb.cases),
        "case_hashes": {c.id: case_hash(c) for c in kb.cases},
        "seed": seed,
        "gbm": GBM,
        "trained_on": {"logs": len(rows), "rows": int(len(y)), "positives": int(y.sum())},
        "target_precision": TARGET_PRECISION,
        "mean": [0.0] * len(FEATURES),
        "scale": [1.0] * len(FEATURES),
        "coef": [0.0] * len(FEATURES),
        "intercept": intercept,
        "learning_rate": GBM["learning_rate"],
        "trees": trees,
        "iso_x": [round(float(v), 6) for v in iso.X_thresholds_],
        "iso_y": [round(float(v), 6) for v in iso.y_thresholds_],
        "p_match": round(p_match, 6),
        "p_uncertain": P_UNCERTAIN,
    }


def outcomes(matching: CachedMatching, kb: KnowledgeBase, items: Sequence[LabelledLog],
             ranker: BoundRanker | None) -> list[Outcome]:
    matcher = Matcher(kb, matching.index, params=MatchParams(), ranker=ranker)
    out = []
    for it in items:
        prepared = matching.distilled(it.log)
        if prepared is None:
            out.append(Outcome(it.expected, (), "unknown", 0.0))
            continue
        verdict, matches = matcher.match(prepared[0], "hybrid", prepared[1])
        out.append(Outcome(it.expected, tuple(m.case_id for m in matches[:3]), verdict,
                           matches[0].score if matches else 0.0))
    return out


def kfold(matching: CachedMatching, kb: KnowledgeBase, items: Sequence[LabelledLog], rows: Sequence[Row],
          k: int = 5, seed: int = DEFAULT_SEED) -> dict[str, Metrics]:
    """Held-back metrics per ablation: each fold scored by a ranker trained on the other folds only."""
    folds = assign_folds(items, k)
    result: dict[str, Metrics] = {}
    for name, used in ABLATIONS.items():
        pooled: list[Outcome] = []
        for f in sorted(set(folds)):
            train = [r for r in rows if folds[r.item] != f]
            held = [it for it, g in zip(items, folds, strict=True) if g == f]
            model = LearnedRanker.from_json(fit(train, items, kb, seed, used))
            pooled += outcomes(matching, kb, held, BoundRanker.for_kb(model, kb.cases))
        result[name] = Metrics.of(pooled)
    result["fixed fusion (shipped params)"] = Metrics.of(outcomes(matching, kb, items, None))
    return result


# ---------------------------------------------------------------------------------------------- query adapter


class AdapterData:
    """What the query adapter trains on: each covered log's distilled query, embedded once (plain MiniLM),
    its case position in the index, and the index's document vectors."""

    def __init__(self, matching: CachedMatching, index: KBIndex):
        self.matching = matching
        self.index = index
        self.docs, self.doc_case = index.document_vectors()
        self.position = {c: i for i, c in enumerate(index.case_ids)}
        self._vectors: dict[str, np.ndarray] = {}  # plain query embeddings, shared with AdaptedIndex

    def pairs(self, items: Sequence[LabelledLog]) -> tuple[list[str], list[str], list[int]]:
        """(ids, queries, case positions) of the items this adapter can learn from: covered, distilled."""
        ids, queries, positions = [], [], []
        for it in items:
            prepared = self.matching.distilled(it.log) if it.expected in self.position else None
            if prepared is None or not prepared[0].query.strip():
                continue
            ids.append(it.id)
            queries.append(prepared[0].query)
            positions.append(self.position[str(it.expected)])
        return ids, queries, positions

    def vectors(self, queries: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(q for q in queries if q not in self._vectors))
        if missing:
            for q, v in zip(missing, self.index.embed_queries(missing), strict=True):
                self._vectors[q] = v
        return np.stack([self._vectors[q] for q in queries])

    def train(self, items: Sequence[LabelledLog], *, lam: float = DEFAULT_LAMBDA, steps: int = DEFAULT_STEPS,
              seed: int = DEFAULT_SEED) -> tuple[QueryAdapter, list[str]]:
        """The adapter trained on these items, and the ids it was trained on."""
        ids, queries, positions = self.pairs(items)
        if not ids:
            raise UserInputError("training the query adapter needs labelled logs of cases in the KB")
        adapter = train_query_adapter(
            self.vectors(queries), positions, self.docs, self.doc_case, lam=lam, steps=steps, seed=seed,
            model_id=self.index.model_id, case_set=case_set_hash(self.index.case_ids))
        return adapter, ids

    def adapted(self, kb: KnowledgeBase, adapter: QueryAdapter) -> CachedMatching:
        """A CachedMatching that searches with this adapter: the shared distillations, a fresh search memo."""
        adapted = CachedMatching(kb, AdaptedIndex(self.index, adapter, self._vectors), self.matching.distilled_fn)
        adapted.restore((self.matching.snapshot()[0], {}))
        return adapted


AdapterTrainer = Callable[[Sequence[LabelledLog]], tuple[QueryAdapter, list[str]]]


def kfold_adapter(matching: CachedMatching, kb: KnowledgeBase, index: KBIndex, items: Sequence[LabelledLog],
                  train: AdapterTrainer, k: int = 5) -> tuple[Metrics, dict[int, list[str]]]:
    """Fixed fusion (shipped params) with the query adapter, held-back: each fold searched with an adapter
    trained on the other folds' logs only (its searches are not the shared cache's: a fresh memo per fold).
    Also returns, per fold, the ids its adapter was trained on."""
    folds = assign_folds(items, k)
    snapshot = matching.snapshot()
    vectors: dict[str, np.ndarray] = {}
    pooled: list[Outcome] = []
    trained_on: dict[int, list[str]] = {}
    for f in sorted(set(folds)):
        train_items = [it for it, g in zip(items, folds, strict=True) if g != f]
        held = [it for it, g in zip(items, folds, strict=True) if g == f]
        adapter, trained_on[f] = train(train_items)
        adapted = CachedMatching(kb, AdaptedIndex(index, adapter, vectors), matching.distilled_fn)
        adapted.restore((snapshot[0], {}))
        pooled += outcomes(adapted, kb, held, None)
    return Metrics.of(pooled), trained_on


def kfold_learned_adapter(data: AdapterData, kb: KnowledgeBase, items: Sequence[LabelledLog], k: int = 5,
                          seed: int = DEFAULT_SEED, lam: float = DEFAULT_LAMBDA,
                          steps: int = DEFAULT_STEPS) -> Metrics:
    """The learned ranker over adapted searches, held-back: per fold an adapter trained on the other folds, the
    ranker's rows collected with that adapter (the training folds' rows are in-sample for the adapter: their
    dense scores are a little better than a new log's), the ranker fit on the other folds' rows, the fold scored."""
    folds = assign_folds(items, k)
    pooled: list[Outcome] = []
    for f in sorted(set(folds)):
        train_items = [it for it, g in zip(items, folds, strict=True) if g != f]
        held = [it for it, g in zip(items, folds, strict=True) if g == f]
        adapter, _ = data.train(train_items, lam=lam, steps=steps, seed=seed)
        adapted = data.adapted(kb, adapter)
        rows = collect(adapted, kb, items)
        model = LearnedRanker.from_json(fit([r for r in rows if folds[r.item] != f], items, kb, seed))
        pooled += outcomes(adapted, kb, held, BoundRanker.for_kb(model, kb.cases))
    return Metrics.of(pooled)


def _cached_matching(doctor: Pipeline, cache: Path | None) -> CachedMatching:
    """The pastes' distillation and searches, kept in a file between runs (they cost the encoder)."""
    # plain dense scores, whatever VLLM_DOCTOR_QUERY_ADAPTER says: the cache holds unadapted searches only
    matching = CachedMatching(doctor.kb, AdaptedIndex(doctor.index, "none"), doctor.distil)
    if cache is not None and cache.is_file():
        try:
            matching.restore(pickle.loads(cache.read_bytes()))
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
            print(f"ignoring unreadable cache {cache}", file=sys.stderr)
    return matching


def _save_cache(matching: CachedMatching, cache: Path | None) -> None:
    if cache is None:
        return
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(pickle.dumps(matching.snapshot()))
    except OSError as exc:
        print(f"cannot write cache {cache}: {exc.strerror or exc}", file=sys.stderr)


def feedback_rows(doctor: Pipeline) -> list[dict[str, Any]]:
    """The team's votes and accepted cases as labelled rows (bot/kb_growth/training.py); each row left out is
    one line on stderr naming it."""
    from bot.kb_growth.db import Database
    from bot.kb_growth.training import training_rows

    settings = doctor.settings
    db = Database(settings.store_target(settings.kb_db_path))
    examples = {c.id: [(ex.source, ex.log) for ex in c.examples] for c in doctor.kb.cases}
    found = training_rows(db, set(doctor.kb.by_id()), examples)
    for line in found.problems:
        print(f"feedback: {line}", file=sys.stderr)
    print(f"feedback: {len(found.rows)} rows from votes and accepted cases", file=sys.stderr)
    return found.rows


DEFAULT_LABELLED = Path(__file__).resolve().parents[2] / "tests" / "eval" / "dev.jsonl"


def retrain(doctor: Any, labelled: Path | None = None, out: Path | None = None) -> str:
    """`vllm-doctor train --with-feedback` from Slack (a reviewer's Retrain button): the labelled file when this
    checkout has it, plus the team's votes and accepted cases; the artifact goes to the ranker path. Returns the
    one-line summary; UserInputError when there is nothing to train on."""
    path = labelled or DEFAULT_LABELLED
    rows = load_labelled(path) if path.is_file() else []
    rows += feedback_rows(doctor)
    items = validate(rows, doctor.kb, path)
    matching = CachedMatching(doctor.kb, doctor.index, doctor.distil)
    artifact = fit(collect(matching, doctor.kb, items), items, doctor.kb)
    target = out or doctor.settings.ranker_path or DEFAULT_ARTIFACT
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(artifact, separators=(",", ":")) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {target}: {exc.strerror or exc}") from None
    return (f"ranker trained on {artifact['trained_on']['logs']} logs ({len(rows)} rows with the team's feedback), "
            f"match at p >= {artifact['p_match']:.3f}: {target.name}")


def run_train(args: argparse.Namespace, doctor: Pipeline) -> int:
    path = Path(args.labelled)
    if not path.is_file():
        raise UserInputError(f"no such file: {path}")
    labelled = load_labelled(path)
    if getattr(args, "with_feedback", False):
        labelled += feedback_rows(doctor)
    items = validate(labelled, doctor.kb, path)
    cache = Path(args.cache) if args.cache else None
    matching = _cached_matching(doctor, cache)
    rows = collect(matching, doctor.kb, items)
    _save_cache(matching, cache)
    data = AdapterData(matching, doctor.index)
    lam, steps = args.adapter_lambda, args.adapter_steps
    if args.kfold:
        table = kfold(matching, doctor.kb, items, rows, k=args.folds, seed=args.seed)
        table["fixed fusion + adapted query embedding (per fold)"], _ = kfold_adapter(
            matching, doctor.kb, doctor.index, items,
            lambda part: data.train(part, lam=lam, steps=steps, seed=args.seed), k=args.folds)
        table["learned fusion + adapted query embedding (per fold)"] = kfold_learned_adapter(
            data, doctor.kb, items, k=args.folds, seed=args.seed, lam=lam, steps=steps)
        blind: dict[str, Metrics] = {}
        if args.blind:
            blind_path = Path(args.blind)
            blind_items = validate(load_labelled(blind_path), doctor.kb, blind_path)
            model = LearnedRanker.from_json(fit(rows, items, doctor.kb, args.seed))
            blind["learned fusion"] = Metrics.of(
                outcomes(matching, doctor.kb, blind_items, BoundRanker.for_kb(model, doctor.kb.cases)))
            blind["fixed fusion (shipped params)"] = Metrics.of(outcomes(matching, doctor.kb, blind_items, None))
            adapter, _ = data.train(items, lam=lam, steps=steps, seed=args.seed)
            adapted = data.adapted(doctor.kb, adapter)
            blind["fixed fusion + adapted query embedding"] = Metrics.of(
                outcomes(adapted, doctor.kb, blind_items, None))
            _save_cache(matching, cache)
        if args.json:
            print(json.dumps({"kfold": {k: m.as_dict() for k, m in table.items()},
                              "blind": {k: m.as_dict() for k, m in blind.items()}}, indent=2))
        else:
            print(format_table(f"grouped {args.folds}-fold over repositories, held-back, clean", table))
            if blind:
                print(format_table(f"blind {args.blind} (trained on all of {path.name}), scored once", blind))
        return 0
    artifact = fit(rows, items, doctor.kb, args.seed)
    out = Path(args.out) if args.out else DEFAULT_ARTIFACT
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(artifact, separators=(",", ":")) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {out}: {exc.strerror or exc}") from None
    adapter, ids = data.train(items, lam=lam, steps=steps, seed=args.seed)
    adapter = replace(adapter, log_ids=tuple(ids))  # `vllm-doctor eval` turns it off on these logs
    adapter_out = out.with_name(ADAPTER_ARTIFACT.name) if args.out else ADAPTER_ARTIFACT
    try:
        adapter.save(adapter_out)
    except OSError as exc:
        raise UserInputError(f"cannot write {adapter_out}: {exc.strerror or exc}") from None
    print(f"query adapter trained on {len(ids)} covered logs (lambda {lam}, {steps} steps, loss "
          f"{adapter.losses[0]:.3f} -> {adapter.losses[-1]:.3f}): {adapter_out}")
    print(f"ranker trained on {artifact['trained_on']['logs']} logs ({artifact['trained_on']['rows']} candidates), "
          f"KB {artifact['kb_version']}, match at p >= {artifact['p_match']:.3f}: {out}")
    return 0


_NAMES = ("top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered")


def format_table(title: str, table: dict[str, Metrics]) -> str:
    rows = [title, "| ranking | covered | uncovered | top-1 | top-3 | confident-wrong | abstain (uncovered) | "
            "match (covered) |", "|---|---|---|---|---|---|---|---|"]
    for name, m in table.items():
        rows.append(f"| {name} | {m.n_covered} | {m.n_uncovered} | " + " | ".join(f"{m.value(n):.3f}" for n in _NAMES)
                    + " |")
    return "\n".join(rows)
