"""Held-back evaluation for `vllm-doctor eval`: grouped k-fold over source repositories, MatchParams tuned
on the training folds only (a deterministic coordinate search), scored on the held-back fold.

Distillation and index searches are cached per paste, so each grid point only re-runs the cheap scoring
in `Matcher.match`, never the encoder.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.diagnosis.match import Fusion, Matcher, MatchParams, Mode, SearchHit, SearchIndex
from bot.errors import UserInputError
from bot.evaluation.eval_variants import truncate
from bot.models import Distilled, LogFacts, Verdict
from kb.loader import KnowledgeBase

if TYPE_CHECKING:
    from indexer.index import AdapterChoice, KBIndex

# Values tried per MatchParams field, in this order, twice over (a field missing from MatchParams is skipped).
# The bm25 weight follows the dense weight (they sum to 1).
GRID: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("match_threshold", (0.55, 0.60, 0.65, 0.70, 0.75, 0.80)),
    ("retrieval_margin", (0.0, 0.04, 0.08, 0.12, 0.16)),
    ("dense_weight", (0.5, 0.6, 0.7, 0.8, 0.9)),
    ("retrieval_scale", (0.65, 0.75, 0.85, 0.95)),
    ("signature_root", (0.70, 0.75, 0.80, 0.85, 0.90)),
    ("signature_other", (0.60, 0.66, 0.72, 0.78)),
    ("signature_symptom", (0.45, 0.55, 0.65)),
    ("frame_weight", (0.0, 0.2, 0.35, 0.5, 0.65, 0.8)),
)
SEARCH_PASSES = 2
METRIC_NAMES = ("top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered")


@dataclass(frozen=True)
class LabelledLog:
    id: str
    log: str
    expected: str | None  # a KB case id, or None when no case covers the failure
    source: str  # the public thread the log was pasted in
    repo: str  # owner/name of the source repository (the fold grouping)


@dataclass(frozen=True)
class Outcome:
    expected: str | None
    ranked: tuple[str, ...]  # case ids, best first (at most 3)
    verdict: Verdict
    score: float = 0.0  # the best case's score (for the threshold sweep)


@dataclass(frozen=True)
class Metrics:
    """covered = expected case in the KB; uncovered = expected null.

    top1 / top3        expected case first / in the first three (covered)
    confident_wrong    verdict "match" on a case that is not the expected one (all logs)
    abstain_uncovered  verdict is not "match" (uncovered)
    match_covered      share of "match" verdicts on covered logs (how often the bot dares to answer)"""

    n_covered: int
    n_uncovered: int
    top1: float
    top3: float
    confident_wrong: float
    abstain_uncovered: float
    match_covered: float

    @classmethod
    def of(cls, outcomes: Iterable[Outcome]) -> Metrics:
        rows = list(outcomes)
        covered = [o for o in rows if o.expected]
        uncovered = [o for o in rows if not o.expected]

        def share(n: int, d: int) -> float:
            return round(n / d, 4) if d else 0.0

        return cls(
            n_covered=len(covered),
            n_uncovered=len(uncovered),
            top1=share(sum(1 for o in covered if o.ranked[:1] == (o.expected,)), len(covered)),
            top3=share(sum(1 for o in covered if o.expected in o.ranked[:3]), len(covered)),
            confident_wrong=share(
                sum(1 for o in rows if o.verdict == "match" and o.ranked[:1] != (o.expected,)), len(rows)
            ),
            abstain_uncovered=share(sum(1 for o in uncovered if o.verdict != "match"), len(uncovered)),
            match_covered=share(sum(1 for o in covered if o.verdict == "match"), len(covered)),
        )

    def value(self, name: str) -> float:
        return float(getattr(self, name))

    def as_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def objective(m: Metrics) -> float:
    """What the tuning maximises: right answers, with a confident wrong one costing four right ones."""
    return m.top1 + 0.5 * m.top3 + 0.5 * m.abstain_uncovered + 0.25 * m.match_covered - 4.0 * m.confident_wrong


_GITHUB = re.compile(r"^https?://(?:www\.)?github\.com/([^/#?]+)/([^/#?]+)(?:/(issues|pull|discussions)/(\d+))?")


def normalise_url(url: str) -> str:
    """One spelling per thread: lower case, no fragment or query, /pull/ = /issues/, no trailing parts."""
    url = url.strip().split("#", 1)[0].split("?", 1)[0].rstrip("/").lower()
    m = _GITHUB.match(url)
    if not m:
        return url
    owner, name, kind, number = m.groups()
    if number is None:
        return f"https://github.com/{owner}/{name}"
    kind = "discussions" if kind == "discussions" else "issues"
    return f"https://github.com/{owner}/{name}/{kind}/{number}"


def repository(url: str) -> str:
    """owner/name of a GitHub thread; the host for anything else (forums, blogs)."""
    m = _GITHUB.match(url.strip().lower())
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    host = re.sub(r"^https?://", "", url.strip().lower()).split("/", 1)[0]
    return host or "unknown"


def assign_folds(items: Sequence[LabelledLog], k: int) -> list[int]:
    """Fold number per item: whole repositories per fold, largest first into the smallest fold."""
    sizes: dict[str, int] = {}
    for it in items:
        sizes[it.repo] = sizes.get(it.repo, 0) + 1
    k = max(2, min(k, len(sizes)))
    load = [0] * k
    fold_of: dict[str, int] = {}
    for repo in sorted(sizes, key=lambda r: (-sizes[r], r)):
        f = min(range(k), key=lambda i: (load[i], i))
        fold_of[repo] = f
        load[f] += sizes[repo]
    return [fold_of[it.repo] for it in items]


class _MemoIndex:
    """The real index, each distinct query searched once."""

    def __init__(self, index: SearchIndex):
        self._index = index
        self._cache: dict[tuple[str, int], Sequence[SearchHit]] = {}

    def search(self, query: str, k: int = 10) -> Sequence[SearchHit]:
        key = (query, k)
        if key not in self._cache:
            self._cache[key] = list(self._index.search(query, k=k))
        return self._cache[key]

    def snapshot(self) -> dict[tuple[str, int], Sequence[SearchHit]]:
        return dict(self._cache)

    def restore(self, searches: dict[tuple[str, int], Sequence[SearchHit]]) -> None:
        self._cache.update(searches)


class CachedMatching:
    """Outcome of a paste under given MatchParams; distillation, searches and outcomes are memoised."""

    def __init__(self, kb: KnowledgeBase, index: SearchIndex, distil: Callable[[str], tuple[Distilled, LogFacts]]):
        self._kb = kb
        self._index = _MemoIndex(index)
        self._distil = distil
        self._distilled: dict[str, tuple[Distilled, LogFacts] | None] = {}
        self._matchers: dict[tuple[MatchParams, Fusion], Matcher] = {}
        self._outcomes: dict[tuple[MatchParams, Fusion, Mode, str], tuple[tuple[str, ...], Verdict, float]] = {}

    @property
    def source_index(self) -> SearchIndex:
        """The index under the memo (the k-fold may wrap the real one: AdaptedIndex)."""
        return self._index._index

    @property
    def distilled_fn(self) -> Callable[[str], tuple[Distilled, LogFacts]]:
        """The distiller this cache calls (another CachedMatching over another index shares it)."""
        return self._distil

    @property
    def index(self) -> SearchIndex:
        """The memoised index (each distinct query searched once)."""
        return self._index

    def snapshot(
        self,
    ) -> tuple[dict[str, tuple[Distilled, LogFacts] | None], dict[tuple[str, int], Sequence[SearchHit]]]:
        """The distillations and searches so far (bot/evaluation/ranker_train.py keeps them in a cache file)."""
        return dict(self._distilled), self._index.snapshot()

    def restore(
        self, data: tuple[dict[str, tuple[Distilled, LogFacts] | None], dict[tuple[str, int], Sequence[SearchHit]]]
    ) -> None:
        distilled, searches = data
        self._distilled.update(distilled)
        self._index.restore(searches)

    def distilled(self, log: str) -> tuple[Distilled, LogFacts] | None:
        """The distilled paste and the facts it states (both what the product ranks on), or None."""
        if log not in self._distilled:
            try:
                self._distilled[log] = self._distil(log)
            except UserInputError:  # empty / binary / too large: the bot answers "unknown"
                self._distilled[log] = None
        return self._distilled[log]

    def _matcher(self, params: MatchParams, fusion: Fusion) -> Matcher:
        key = (params, fusion)
        if key not in self._matchers:
            self._matchers[key] = Matcher(self._kb, self._index, params=params, fusion=fusion)
        return self._matchers[key]

    def outcome(
        self, log: str, expected: str | None, params: MatchParams, mode: Mode = "hybrid", fusion: Fusion = "weighted"
    ) -> Outcome:
        key = (params, fusion, mode, log)
        if key not in self._outcomes:
            prepared = self.distilled(log)
            if prepared is None:
                self._outcomes[key] = ((), "unknown", 0.0)
            else:
                distilled, facts = prepared
                verdict, matches = self._matcher(params, fusion).match(distilled, mode=mode, facts=facts)
                best = matches[0].score if matches else 0.0
                self._outcomes[key] = (tuple(m.case_id for m in matches[:3]), verdict, best)
        ranked, verdict, best = self._outcomes[key]
        return Outcome(expected, ranked, verdict, best)


def _with(params: MatchParams, name: str, value: float) -> MatchParams:
    if name == "dense_weight" and any(f.name == "bm25_weight" for f in fields(params)):
        return replace(params, dense_weight=value, bm25_weight=round(1.0 - value, 4))
    return replace(params, **{name: value})


def with_truncated(items: Sequence[LabelledLog]) -> list[LabelledLog]:
    """The logs, plus each one cut before the exception line of its last traceback (where it has one), so the
    tuning also sees cut tracebacks (frame_weight is only used on those)."""
    cut = [(it, truncate(it.log)) for it in items]
    return [*items, *(replace(it, id=it.id + "#truncated", log=log) for it, log in cut if log is not None)]


def tune(matching: CachedMatching, items: Sequence[LabelledLog], start: MatchParams | None = None) -> MatchParams:
    """Coordinate search over GRID on these (training) logs; deterministic: ties keep the current value."""
    params = start or MatchParams()
    known = {f.name for f in fields(params)}

    def score(p: MatchParams) -> float:
        return objective(Metrics.of(matching.outcome(it.log, it.expected, p) for it in items))

    best = score(params)
    for _ in range(SEARCH_PASSES):
        changed = False
        for name, values in GRID:
            if name not in known:
                continue
            for value in values:
                candidate = _with(params, name, value)
                if candidate == params:
                    continue
                s = score(candidate)
                if s > best + 1e-9:
                    params, best, changed = candidate, s, True
        if not changed:
            break
    return params


@dataclass(frozen=True)
class FoldResult:
    fold: int
    repos: tuple[str, ...]
    params: MatchParams
    tuning: Metrics  # on the training folds, with the params tuned there
    heldback: Metrics  # clean logs of this fold, same params


@dataclass(frozen=True)
class Spread:
    mean: float
    stdev: float
    low: float
    high: float


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread(0.0, 0.0, 0.0, 0.0)
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return Spread(round(statistics.fmean(values), 4), round(sd, 4), round(min(values), 4), round(max(values), 4))


def cross_validate(
    matching: CachedMatching, items: Sequence[LabelledLog], k: int
) -> tuple[list[FoldResult], list[int], list[MatchParams]]:
    """Per fold: tune on the other folds, score this one. Returns the folds, each item's fold and the params
    tuned without it."""
    folds = assign_folds(items, k)
    params_of: list[MatchParams] = [MatchParams()] * len(items)
    results = []
    for f in sorted(set(folds)):
        train = [it for it, g in zip(items, folds, strict=True) if g != f]
        held = [i for i, g in enumerate(folds) if g == f]
        params = tune(matching, with_truncated(train))
        for i in held:
            params_of[i] = params
        results.append(
            FoldResult(
                fold=f,
                repos=tuple(sorted({items[i].repo for i in held})),
                params=params,
                tuning=Metrics.of(matching.outcome(it.log, it.expected, params) for it in train),
                heldback=Metrics.of(matching.outcome(items[i].log, items[i].expected, params) for i in held),
            )
        )
    return results, folds, params_of


class AdaptedIndex:
    """The KB index searched with a chosen query adapter ("none": the plain dense scores), whatever the index's
    own setting is: the k-fold scores each fold with the adapter trained on the other folds."""

    def __init__(self, index: KBIndex, adapter: AdapterChoice, vectors: dict[str, np.ndarray] | None = None):
        self.index = index
        self.adapter = adapter
        self.vectors = vectors  # plain query embeddings shared between folds (each query embedded once)

    def search(self, query: str, k: int = 10) -> Sequence[SearchHit]:
        vector = None
        if self.vectors is not None and query.strip():
            if query not in self.vectors:
                self.vectors[query] = self.index.embed_queries([query])[0]
            vector = self.vectors[query]
        hits: Sequence[SearchHit] = self.index.search(  # type: ignore[assignment]
            query, k, adapter=self.adapter, vector=vector)
        return hits


def adapter_trained_on(index: Any, items: Sequence[LabelledLog]) -> int:
    """How many of these labelled logs the index's query adapter was trained on (0: none, or no adapter).
    Scoring those logs with it would report its training fit as a held-back number."""
    adapter = getattr(index, "query_adapter", None)
    seen = set(getattr(adapter, "log_ids", ()))
    return sum(1 for it in items if it.id in seen) if seen else 0
