"""The learned ranker (issue 26): per-(paste, case) features and the scoring of a trained artifact.

The matcher (bot/diagnosis/match.py) still finds the candidates and their signals (signatures, BM25, dense, frames,
fact rules, roles, versions) and still orders a cause's signature or proven rule above everything else;
this module replaces the fixed fusion arithmetic of the remaining score with a model trained on the labelled
logs (bot/evaluation/ranker_train.py, `vllm-doctor train`) and calibrated on held-back folds, mapped onto the matcher's
score scale so that `match` keeps its meaning (held-back precision ≥ the artifact's target).

Inference is plain Python over the JSON artifact (a logistic layer over the features plus a small forest of
regression trees): no heavy library at serving time. A case the artifact does not know (added or edited
after training: its content hash differs) keeps today's fused score; a missing, unreadable or foreign
artifact gives today's ranking with one warning line, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb.schema import Case

ARTIFACT_FORMAT = 1
DEFAULT_ARTIFACT = Path(__file__).resolve().parents[2] / "kb" / "ranker" / "ranker.json"
ROLES = ("cause", "symptom", "advisory")
# The lowest score a rescored candidate gets (bot/diagnosis/match.py MIN_SCORE drops candidates below 0.10): a candidate
# the fixed fusion kept stays listed, so top-3 still holds three cases.
SCORE_FLOOR = 0.10
# Isotonic calibration is a step function: this much of the raw output's logistic breaks its ties, so the
# order within one step stays the model's.
TIE_BREAK = 1e-4


@dataclass(frozen=True)
class Candidate:
    """What the matcher knows about one candidate case of one paste (bot/diagnosis/match.py builds it)."""

    case_id: str
    role: str
    score: float  # today's fused score (after the symptom / advisory demotions)
    strong: bool  # a cause's signature or a proven fact rule
    signature: bool
    sig_root: bool  # a signature hit on a root-error line (not INFO/WARNING)
    sig_quiet: bool  # signature hits only on INFO/WARNING lines
    unexplained: bool  # the paste has a root error this case's signatures do not hit
    earliest: bool  # the cause whose fingerprint sits on the earliest error line
    dense: float  # raw cosine from the index search (whatever encoder produced it)
    bm25: float  # raw BM25 from the index search
    retrieval: float  # today's fused retrieval score
    frames: float  # fingerprint score of a cut traceback's frames
    fact_rule: bool
    version_penalty: bool  # the log's version is outside the case's range or already fixed
    first_hit: float  # position of the first signature hit in the paste, 0..1 (1.0 without a hit)
    plain_text: bool  # retrieval came from the asker's own lines searched alone


@dataclass(frozen=True)
class PasteContext:
    total_lines: int
    truncated: bool
    n_roots: int
    quiet_only: bool


FEATURES: tuple[str, ...] = (
    "score", "strong", "signature", "sig_root", "sig_quiet", "unexplained", "earliest",
    "dense", "bm25_log", "bm25_rel", "retrieval", "frames", "fact_rule", "version_penalty", "first_hit",
    "plain_text", "role_cause", "role_symptom", "role_advisory",
    "rank_score", "rank_dense", "rank_bm25", "gap_score", "gap_dense", "gap_bm25",
    "n_signature", "n_candidates", "truncated", "log_lines", "n_roots", "quiet_only",
)


def _rank(values: Sequence[float], i: int) -> float:
    """0-based rank of values[i] (ties share the better rank), capped and scaled to 0..1."""
    better = sum(1 for v in values if v > values[i] + 1e-12)
    return min(better, 10) / 10.0


def features(cands: Sequence[Candidate], ctx: PasteContext) -> list[list[float]]:
    """One feature vector per candidate (FEATURES order); rank and gap features compare within the paste."""
    scores = [c.score for c in cands]
    denses = [c.dense for c in cands]
    bm25s = [c.bm25 for c in cands]
    top_bm25 = max(bm25s, default=0.0) or 1.0
    n_sig = sum(1 for c in cands if c.signature)
    rows = []
    for i, c in enumerate(cands):
        others = [j for j in range(len(cands)) if j != i]
        best_other = max((scores[j] for j in others), default=0.0)
        best_dense = max((denses[j] for j in others), default=0.0)
        best_bm25 = max((bm25s[j] for j in others), default=0.0)
        rows.append([
            c.score, float(c.strong), float(c.signature), float(c.sig_root), float(c.sig_quiet),
            float(c.unexplained), float(c.earliest),
            c.dense, math.log1p(max(c.bm25, 0.0)), max(c.bm25, 0.0) / top_bm25, c.retrieval, c.frames,
            float(c.fact_rule), float(c.version_penalty), c.first_hit, float(c.plain_text),
            float(c.role == "cause"), float(c.role == "symptom"), float(c.role == "advisory"),
            _rank(scores, i), _rank(denses, i), _rank(bm25s, i),
            c.score - best_other, c.dense - best_dense, math.log1p(max(c.bm25, 0.0)) - math.log1p(max(best_bm25, 0.0)),
            min(n_sig, 5) / 5.0, min(len(cands), 20) / 20.0, float(ctx.truncated),
            math.log10(max(ctx.total_lines, 1)), min(ctx.n_roots, 10) / 10.0, float(ctx.quiet_only),
        ])
    return rows


def case_hash(case: Case) -> str:
    """What the artifact remembers of a case: a change to its text, signatures, role or examples is a new case."""
    payload = json.dumps(case.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def kb_hash(cases: Iterable[Case]) -> str:
    digest = hashlib.sha256()
    for h in sorted(case_hash(c) for c in cases):
        digest.update(h.encode("ascii"))
    return digest.hexdigest()[:16]


class RankerError(ValueError):
    """The artifact cannot be used (missing, unreadable, another format): the fixed ranking answers."""


def _sigmoid(raw: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-500.0, min(500.0, raw))))


def _tree_value(tree: dict[str, list[float]], x: Sequence[float]) -> float:
    left, right, feat, thr, value = tree["left"], tree["right"], tree["feature"], tree["threshold"], tree["value"]
    node = 0
    while left[node] >= 0:
        node = int(left[node]) if x[int(feat[node])] <= thr[node] else int(right[node])
    return value[node]


@dataclass(frozen=True)
class LearnedRanker:
    """A trained artifact: raw = intercept + w·z(x) + lr × Σ trees(x); p = isotonic(raw); score = map(p)."""

    kb_version: str
    case_hashes: dict[str, str]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    trees: tuple[dict[str, list[float]], ...]
    learning_rate: float
    iso_x: tuple[float, ...]  # isotonic calibration: raw → probability (piecewise linear)
    iso_y: tuple[float, ...]
    p_match: float  # calibrated probability where held-back precision of 'match' reaches the target
    p_uncertain: float

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LearnedRanker:
        try:
            if data.get("format") != ARTIFACT_FORMAT or list(data["features"]) != list(FEATURES):
                raise RankerError("artifact format or feature list differs from this version of the bot")
            return cls(
                kb_version=str(data["kb_version"]),
                case_hashes={str(k): str(v) for k, v in data["case_hashes"].items()},
                mean=tuple(float(v) for v in data["mean"]),
                scale=tuple(float(v) for v in data["scale"]),
                coef=tuple(float(v) for v in data["coef"]),
                intercept=float(data["intercept"]),
                trees=tuple(
                    {k: [float(v) for v in t[k]] for k in ("left", "right", "feature", "threshold", "value")}
                    for t in data["trees"]
                ),
                learning_rate=float(data["learning_rate"]),
                iso_x=tuple(float(v) for v in data["iso_x"]),
                iso_y=tuple(float(v) for v in data["iso_y"]),
                p_match=float(data["p_match"]),
                p_uncertain=float(data["p_uncertain"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, RankerError):
                raise
            raise RankerError(f"artifact is malformed ({type(exc).__name__}: {exc})") from exc

    @classmethod
    def load(cls, path: Path) -> LearnedRanker:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise RankerError(f"no ranker artifact at {path} (run `vllm-doctor train`)") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RankerError(f"ranker artifact {path} is unreadable ({exc})") from exc
        if not isinstance(data, dict):
            raise RankerError(f"ranker artifact {path} is not a JSON object")
        return cls.from_json(data)

    def stale_cases(self, cases: Iterable[Case]) -> list[str]:
        """Cases this artifact was not trained with (new, or edited since): they keep the fixed score."""
        return sorted(c.id for c in cases if self.case_hashes.get(c.id) != case_hash(c))

    def raw(self, x: Sequence[float]) -> float:
        z = self.intercept + sum(
            w * (v - m) / s for w, v, m, s in zip(self.coef, x, self.mean, self.scale, strict=True)
        )
        return z + self.learning_rate * sum(_tree_value(t, x) for t in self.trees)

    def probability(self, raw: float) -> float:
        xs, ys = self.iso_x, self.iso_y
        if not xs:
            return _sigmoid(raw)
        if raw <= xs[0]:
            return ys[0]
        if raw >= xs[-1]:
            return ys[-1]
        lo, hi = 0, len(xs) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if xs[mid] <= raw:
                lo = mid
            else:
                hi = mid
        span = xs[hi] - xs[lo]
        return ys[lo] if span <= 0 else ys[lo] + (ys[hi] - ys[lo]) * (raw - xs[lo]) / span

    def to_score(self, p: float, match: float, uncertain: float) -> float:
        """Calibrated probability → the matcher's scale: p_match ↦ match threshold, p_uncertain ↦ uncertain."""
        pu, pm = self.p_uncertain, max(self.p_match, self.p_uncertain + 1e-6)
        if p >= pm:
            return match + (1.0 - match) * (p - pm) / max(1.0 - pm, 1e-6)
        if p >= pu:
            return uncertain + (match - uncertain) * (p - pu) / (pm - pu)
        return SCORE_FLOOR + (uncertain - SCORE_FLOOR) * p / max(pu, 1e-6)

    def rescore(
        self, cands: Sequence[Candidate], ctx: PasteContext, match: float, uncertain: float, known: frozenset[str]
    ) -> list[float | None]:
        """A new score per candidate on the matcher's scale; None for a case outside `known` (fixed score)."""
        out: list[float | None] = []
        for c, x in zip(cands, features(cands, ctx), strict=True):
            if c.case_id not in known:
                out.append(None)
                continue
            raw = self.raw(x)
            p = min(1.0, self.probability(raw) + TIE_BREAK * _sigmoid(raw))
            out.append(round(self.to_score(p, match, uncertain), 6))
        return out


@dataclass(frozen=True)
class BoundRanker:
    """A learned ranker bound to one KB: the cases it may rescore (the others keep the fixed score)."""

    model: LearnedRanker
    known: frozenset[str]

    @classmethod
    def for_kb(cls, model: LearnedRanker, cases: Sequence[Case]) -> BoundRanker:
        stale = set(model.stale_cases(cases))
        return cls(model, frozenset(c.id for c in cases if c.id not in stale))

    def rescore(
        self, cands: Sequence[Candidate], ctx: PasteContext, match: float, uncertain: float
    ) -> list[float | None]:
        return self.model.rescore(cands, ctx, match, uncertain, self.known)


def load_for_kb(path: Path, cases: Sequence[Case]) -> tuple[BoundRanker | None, str | None]:
    """The ranker for this KB and a one-line warning (missing / unreadable artifact, or cases it does not know)."""
    try:
        model = LearnedRanker.load(path)
    except RankerError as exc:
        return None, f"learned ranker off, fixed ranking used: {exc}"
    bound = BoundRanker.for_kb(model, cases)
    stale = len(cases) - len(bound.known)
    if not bound.known:
        return None, f"learned ranker off, fixed ranking used: {path} was trained on another KB ({model.kb_version})"
    warning = None
    if stale:
        warning = (f"learned ranker: {stale} case(s) new or edited since training keep the fixed score "
                   "(run `vllm-doctor train`)")
    return bound, warning
