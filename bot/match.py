"""Distilled log → ranked KB matches with evidence and a verdict.

Three signals, strongest first:
1. signatures: exact regex fingerprints from the case files (elastic-recheck style) on the cleaned lines;
2. BM25 over the masked query (exact tokens: flags, error names, library names);
3. dense MiniLM cosine over the same query (paraphrases, reordered messages).
Retrieval scores are fused (weighted, or reciprocal-rank fusion: chosen by `vllm-doctor eval`), then
mapped to a 0..1 confidence. The verdict comes from calibrated thresholds (docs/matching.md): a confident
wrong answer is worse than "unknown", so "match" needs a signature hit or very strong agreement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from bot.models import Distilled, Evidence, LogLine, Match, Verdict
from indexer.text import mask
from kb.loader import KnowledgeBase
from kb.schema import Case

Mode = Literal["hybrid", "bm25", "dense"]
Fusion = Literal["weighted", "rrf"]

TOP_K = 5
RRF_K = 60
# Calibrated on tests/eval/dev.jsonl with `vllm-doctor eval` (see docs/matching.md for the sweep).
DEFAULT_MATCH_THRESHOLD = 0.70
DEFAULT_UNCERTAIN_THRESHOLD = 0.40
# Dense cosine between a masked log and a case is ~0.15 for unrelated text and ~0.8 for a paraphrase.
DENSE_FLOOR, DENSE_CEIL = 0.25, 0.80
# A retrieval-only best case must beat the runner-up by this much to be a confident 'match'.
RETRIEVAL_MARGIN = 0.08
# Candidates below this are not shown at all (ordinary chatter has nothing near it).
MIN_SCORE = 0.10
# Feedback prior ("Fixed it" / "Didn't help", bot/kb_growth/feedback.py): added to a case's score, clamped here
# so no caller can move a ranking by more than this (docs/kb-growth.md).
MAX_PRIOR = 0.03

_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
_STOP = frozenset(
    "the and for with that this from are was not you your has have but use when num path hex uuid into "
    "its can will than then more most file line none true false self".split()
)


class SearchHit(Protocol):
    case_id: str
    dense: float
    bm25: float
    dense_rank: int | None
    bm25_rank: int | None


class SearchIndex(Protocol):
    def search(self, query: str, k: int = 10) -> Sequence[SearchHit]: ...


@dataclass(frozen=True)
class Thresholds:
    match: float = DEFAULT_MATCH_THRESHOLD
    uncertain: float = DEFAULT_UNCERTAIN_THRESHOLD

    def verdict(self, score: float) -> Verdict:
        if score >= self.match:
            return "match"
        if score >= self.uncertain:
            return "uncertain"
        return "unknown"


@dataclass(frozen=True)
class MatchParams:
    """Every tunable number of the matcher in one value, so `vllm-doctor eval` can tune it on one split of
    the labelled logs and report another (docs/matching.md). Defaults are the calibrated values."""

    match_threshold: float = DEFAULT_MATCH_THRESHOLD
    uncertain_threshold: float = DEFAULT_UNCERTAIN_THRESHOLD
    retrieval_margin: float = RETRIEVAL_MARGIN
    dense_weight: float = 0.7
    bm25_weight: float = 0.3
    signature_root: float = 0.80  # base score of a signature hit on a root-error line
    signature_other: float = 0.72  # ... on any other line
    signature_secondary: float = 0.55  # ... of a symptom/advisory case
    retrieval_scale: float = 0.75  # retrieval-only score multiplier

    def thresholds(self) -> Thresholds:
        return Thresholds(self.match_threshold, self.uncertain_threshold)


@dataclass(frozen=True)
class SignatureHit:
    line: LogLine
    pattern: str


def _scoped_flags(pattern: str) -> str:
    """'(?i)foo' → '(?i:foo)' so patterns with global flags can sit inside one alternation."""
    m = re.match(r"^\(\?([aiLmsux]+)\)", pattern)
    return f"(?{m.group(1)}:{pattern[m.end():]})" if m else pattern


class SignatureScanner:
    """All case signatures; one combined regex pre-filters lines so most lines cost a single search."""

    def __init__(self, cases: Iterable[Case]):
        self._patterns: list[tuple[str, str, re.Pattern[str]]] = []
        for case in cases:
            for pattern in case.signatures:
                self._patterns.append((case.id, pattern, re.compile(pattern)))
        try:
            combined = "|".join(f"(?:{_scoped_flags(p)})" for _, p, _ in self._patterns)
            self._prefilter: re.Pattern[str] | None = re.compile(combined) if combined else None
        except re.error:
            self._prefilter = None

    def scan(self, lines: Iterable[LogLine]) -> dict[str, list[SignatureHit]]:
        hits: dict[str, list[SignatureHit]] = {}
        for line in lines:
            if self._prefilter is not None and not self._prefilter.search(line.text):
                continue
            for case_id, pattern, compiled in self._patterns:
                if compiled.search(line.text):
                    bucket = hits.setdefault(case_id, [])
                    if len(bucket) < 5 and all(h.line.line_no != line.line_no for h in bucket):
                        bucket.append(SignatureHit(line, pattern))
        return hits


_META = re.compile(r"\\[dDsSwWbBAZ]|\\.|[\^$.*+?()\[\]{}|]")


def signature_literals(cases: Iterable[Case]) -> list[str]:
    """The longest literal run of each signature (e.g. 'tool choice requires --enable-auto-tool-choice')."""
    out = []
    for case in cases:
        for pattern in case.signatures:
            body = re.sub(r"^\(\?[aiLmsux]+\)", "", pattern)
            body = re.sub(r"\[[^\]]*\]|\(\?[:=!<][^)]*", " ", body)  # character classes, group prefixes
            runs = [r.strip(" :;,'\"") for r in _META.split(body)]
            best = max(runs, key=len, default="")
            if len(best) >= 5:
                out.append(best)
    return out


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


class Matcher:
    def __init__(
        self,
        kb: KnowledgeBase,
        index: SearchIndex,
        thresholds: Thresholds | None = None,
        fusion: Fusion = "weighted",
        priors: Mapping[str, float] | None = None,
        params: MatchParams | None = None,
    ):
        """priors: optional case id → small score adjustment from user feedback (clamped to ±MAX_PRIOR).

        thresholds, when given, override the ones in params (settings overrides)."""
        self.params = params or MatchParams()
        self.kb = kb
        self.priors = priors
        self.cases = kb.by_id()
        self.index = index
        self.thresholds = thresholds or self.params.thresholds()
        self.fusion: Fusion = fusion
        self.scanner = SignatureScanner(kb.cases)
        self._case_words = {c.id: _words(c.search_text() + " " + " ".join(e.log for e in c.examples)) for c in kb.cases}

    # -- scoring -----------------------------------------------------------------------------------
    def _retrieval_scores(self, query: str, mode: Mode) -> dict[str, tuple[float, dict[str, float]]]:
        if not query.strip():
            return {}
        hits = list(self.index.search(query, k=20))
        if not hits:
            return {}
        top_bm25 = max((h.bm25 for h in hits), default=0.0) or 1.0
        out: dict[str, tuple[float, dict[str, float]]] = {}
        for h in hits:
            dense = max(0.0, min(1.0, (h.dense - DENSE_FLOOR) / (DENSE_CEIL - DENSE_FLOOR)))
            bm25 = max(0.0, h.bm25 / top_bm25) if h.bm25 > 0 else 0.0
            # A lexical score is only meaningful when the query shares rare words with the case.
            if mode == "dense":
                score = dense
            elif mode == "bm25":
                score = bm25 * min(1.0, h.bm25 / 8.0)
            elif self.fusion == "rrf":
                rrf = sum(1.0 / (RRF_K + r) for r in (h.dense_rank, h.bm25_rank) if r is not None)
                score = rrf / (2.0 / (RRF_K + 1)) * dense ** 0.5
            else:
                p = self.params
                score = p.dense_weight * dense + p.bm25_weight * bm25 * min(1.0, h.bm25 / 8.0)
            out[h.case_id] = (
                score,
                {"dense": round(h.dense, 4), "bm25": round(h.bm25, 4), "retrieval": round(score, 4)},
            )
        return out

    def match(self, distilled: Distilled, mode: Mode = "hybrid") -> tuple[Verdict, tuple[Match, ...]]:
        sig_hits = self.scanner.scan(distilled.cleaned or distilled.evidence) if mode == "hybrid" else {}
        retrieval = self._retrieval_scores(distilled.query, mode)
        root_lines = {r.line_no for r in distilled.root_errors}

        scored: list[tuple[float, int, str, dict[str, float]]] = []
        for case_id in set(sig_hits) | set(retrieval):
            case = self.cases.get(case_id)
            if case is None:
                continue
            r, parts = retrieval.get(case_id, (0.0, {}))
            parts = dict(parts)
            hits = sig_hits.get(case_id, [])
            if hits:
                on_root = any(h.line.line_no in root_lines for h in hits)
                p = self.params
                base = p.signature_secondary if case.secondary else p.signature_root if on_root else p.signature_other
                score = base + 0.2 * r
                tier = 1 if case.secondary else 2
                parts["signature"] = 1.0
            else:
                score = self.params.retrieval_scale * r
                tier = 0
            prior = self._prior(case_id)
            if prior:
                score = max(0.0, score + prior)
                parts["prior"] = round(prior, 4)
            parts["score"] = round(score, 4)
            scored.append((score, tier, case_id, parts))

        # Root-cause signature hits first; secondary hits and retrieval-only cases compete on score.
        scored.sort(key=lambda s: (s[1] == 2, s[0]), reverse=True)
        scored = [s for s in scored if s[0] >= MIN_SCORE]  # near-zero candidates are noise, not "nearest cases"
        matches = []
        for score, _tier, case_id, parts in scored[:TOP_K]:
            case = self.cases[case_id]
            matches.append(
                Match(
                    case_id=case_id,
                    title=case.title,
                    title_zh=case.title_zh,
                    area=case.area,
                    score=round(min(score, 1.0), 3),
                    signature_hit=case_id in sig_hits,
                    evidence=self._evidence(case_id, sig_hits.get(case_id, []), distilled),
                    scores=parts,
                )
            )
        if len(matches) >= 2 and not matches[0].signature_hit:
            # Retrieval alone is only trusted when it clearly separates the best case from the next one;
            # two close candidates mean "uncertain", never a confident answer.
            if matches[0].score - matches[1].score < self.params.retrieval_margin:
                capped = min(matches[0].score, round(self.thresholds.match - 0.01, 3))
                matches[0] = replace(matches[0], score=capped)
        verdict = self.thresholds.verdict(matches[0].score) if matches else "unknown"
        return verdict, tuple(matches)

    def _prior(self, case_id: str) -> float:
        if not self.priors:
            return 0.0
        return max(-MAX_PRIOR, min(MAX_PRIOR, float(self.priors.get(case_id, 0.0))))

    def _evidence(self, case_id: str, hits: list[SignatureHit], distilled: Distilled) -> tuple[Evidence, ...]:
        if hits:
            return tuple(Evidence(h.line.line_no, h.line.text, f"signature: {h.pattern}") for h in hits[:3])
        words = self._case_words[case_id]
        ranked = []
        for line in distilled.root_errors or distilled.evidence:
            overlap = _words(mask(line.text)) & words  # masked: path fragments are not evidence
            if overlap:
                ranked.append((len(overlap), line, sorted(overlap)[:6]))
        ranked.sort(key=lambda t: -t[0])
        return tuple(
            Evidence(line.line_no, line.text, "shared terms: " + ", ".join(terms)) for _, line, terms in ranked[:3]
        )
