"""Questions without a log ("生成太慢了，有什么办法提速", "how do I make decoding faster") → ranked KB cases.

A question is short text with no log structure. It is searched in two views:
- lexical: the question plus the glossary's forms in the other language (kb/glossary.yaml), through BM25
  over both languages of every case (Chinese segmented by indexer.segment);
- dense: the English view only (the question's Latin words plus the glossary's English forms), because
  MiniLM reads English.
The verdict is `match` only when one case clearly wins (score and margin over the runner-up); otherwise
`uncertain` with the candidates, so a question never gets a confident wrong answer. Evidence names the
question terms that matched each case. Rules and numbers: docs/language.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.models import Evidence, Language, Match, Verdict
from indexer.lexical import tokenize
from kb.glossary import Glossary, TermHit, has_cjk
from kb.loader import KnowledgeBase

# A line with any of these is log output, not a question (tracebacks, logger prefixes, timestamps,
# exception names such as "ValueError", "error:" messages, worker prefixes, shell prompts, quoted output).
_LOG_LINE_RE = re.compile(
    r"Traceback \(most recent call last\)|^\s*File \"|^\s*(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)[\s:]"
    r"|\b\d{2}:\d{2}:\d{2}\b|\([^)]*\bpid=\d+|^\s*\[rank\d+\]|^\s*>|^\S+@\S+[:#$]"
    r"|[A-Za-z](?:Error|Exception)\b|\berror:|\berror\s+code\b",
    re.IGNORECASE,
)
MAX_QUESTION_CHARS = 600
MAX_QUESTION_LINES = 6
_LATIN_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]*")


def looks_like_question(text: str) -> bool:
    """Short human text without any log line."""
    stripped = text.strip()
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    if not lines or len(stripped) > MAX_QUESTION_CHARS or len(lines) > MAX_QUESTION_LINES:
        return False
    return not any(_LOG_LINE_RE.search(ln) for ln in lines)


def is_deployment_question(text: str, glossary: Glossary) -> bool:
    """A question about deploying vLLM (names a glossary term or vLLM), not "hi" or "thanks": in a DM the
    bot answers it; other text gets the usage hint."""
    return looks_like_question(text) and ("vllm" in text.lower() or bool(glossary.lookup(text)))


def question_language(text: str) -> Language:
    """Chinese when the question has at least two Chinese characters (people mix in English terms)."""
    return "zh" if len(re.findall(r"[\u3400-\u9fff\uf900-\ufaff]", text)) >= 2 else "en"


@dataclass(frozen=True)
class ExpandedQuestion:
    text: str
    lexical: str  # question + the other language's glossary forms
    english: str  # Latin words of the question + English glossary forms (for the dense encoder)
    terms: tuple[TermHit, ...]


def expand(text: str, glossary: Glossary) -> ExpandedQuestion:
    hits = tuple(glossary.lookup(text))
    other = [form for h in hits for form in h.other]
    english_forms = [form for h in hits for form in (h.other if h.language == "zh" else (h.found,))]
    latin = " ".join(_LATIN_WORD_RE.findall(text))
    english = " ".join(dict.fromkeys([latin, *english_forms])).strip() if (latin or english_forms) else ""
    lexical = " ".join([text, *dict.fromkeys(f for f in other if not has_cjk(f) or f not in text)])
    return ExpandedQuestion(text, lexical, english, hits)


class QuestionHit(Protocol):
    case_id: str
    dense: float | None
    bm25: float | None


class QuestionIndex(Protocol):
    def dense_search(self, query: str, k: int = 10) -> Sequence[QuestionHit]: ...

    def lexical_search(self, query: str, k: int = 10) -> Sequence[QuestionHit]: ...


@dataclass(frozen=True)
class QuestionParams:
    """Tuned on the 'tune' half of tests/eval/questions.jsonl, reported on the other half (README)."""

    dense_weight: float = 0.45
    bm25_weight: float = 0.55
    bm25_saturation: float = 8.0  # raw BM25 at which lexical evidence counts fully
    dense_floor: float = 0.20
    dense_ceil: float = 0.65
    match_threshold: float = 0.70
    uncertain_threshold: float = 0.25
    margin: float = 0.15  # the best case must beat the runner-up by this much to be a 'match'
    # 'match' also needs both channels to rank the case first (when the question has an English view):
    # two retrievers that disagree mean the question is ambiguous, so the answer lists candidates.
    require_agreement: bool = True


@dataclass(frozen=True)
class QuestionResult:
    verdict: Verdict
    matches: tuple[Match, ...]
    language: Language
    expanded: ExpandedQuestion


class QuestionMatcher:
    def __init__(
        self, kb: KnowledgeBase, index: QuestionIndex, glossary: Glossary, params: QuestionParams | None = None
    ):
        self.kb = kb
        self.cases = kb.by_id()
        self.index = index
        self.glossary = glossary
        self.params = params or QuestionParams()
        self._case_tokens = {
            c.id: set(tokenize(c.search_text() + "\n" + c.search_text_zh())) for c in kb.cases
        }

    def match(self, text: str, top_k: int = 5) -> QuestionResult:
        p = self.params
        expanded = expand(text, self.glossary)
        bm25 = {h.case_id: float(h.bm25 or 0.0) for h in self.index.lexical_search(expanded.lexical, k=20)}
        dense: dict[str, float] = {}
        if expanded.english:
            dense = {h.case_id: float(h.dense or 0.0) for h in self.index.dense_search(expanded.english, k=20)}
        top_bm25 = max(bm25.values(), default=0.0) or 1.0
        scored: list[tuple[float, str, dict[str, float]]] = []
        for case_id in set(bm25) | set(dense):
            if case_id not in self.cases:
                continue
            raw_b, raw_d = bm25.get(case_id, 0.0), dense.get(case_id, 0.0)
            b = (raw_b / top_bm25) * min(1.0, raw_b / p.bm25_saturation)
            d = max(0.0, min(1.0, (raw_d - p.dense_floor) / (p.dense_ceil - p.dense_floor)))
            score = p.dense_weight * d + p.bm25_weight * b if dense else b
            parts = {"bm25": round(raw_b, 4), "dense": round(raw_d, 4), "score": round(score, 4)}
            scored.append((score, case_id, parts))
        scored.sort(key=lambda s: (-s[0], s[1]))
        scored = [s for s in scored if s[0] >= 0.05][:top_k]
        lang = question_language(text)
        matches = tuple(self._match(score, case_id, parts, text, expanded, lang) for score, case_id, parts in scored)
        verdict: Verdict = "unknown"
        if matches:
            best = matches[0].score
            runner_up = matches[1].score if len(matches) > 1 else 0.0
            top_id = matches[0].case_id
            agree = not dense or not p.require_agreement or (
                bool(bm25) and max(bm25, key=lambda c: bm25[c]) == top_id
                and max(dense, key=lambda c: dense[c]) == top_id
            )
            if best >= p.match_threshold and best - runner_up >= p.margin and agree:
                verdict = "match"
            elif best >= p.uncertain_threshold:
                verdict = "uncertain"
        return QuestionResult(verdict, matches, lang, expanded)

    def _match(
        self, score: float, case_id: str, parts: dict[str, float], text: str, expanded: ExpandedQuestion, lang: Language
    ) -> Match:
        case = self.cases[case_id]
        return Match(
            case_id=case_id,
            title=case.title,
            title_zh=case.title_zh,
            area=case.area,
            score=round(min(score, 1.0), 3),
            signature_hit=False,
            evidence=(Evidence(1, text.strip()[:300], self._why(case_id, text, expanded, lang), "question_terms"),),
            scores=parts,
        )

    def _why(self, case_id: str, text: str, expanded: ExpandedQuestion, lang: Language) -> str:
        """The question's own terms that this case shares, then glossary terms that led to it."""
        words = self._case_tokens[case_id]
        shared = [t for t in dict.fromkeys(tokenize(text)) if t in words]
        # search-mode segmentation yields 分布式 and its parts 分布, 布式: name the longest words only
        shared = [t for t in shared if not any(t != o and t in o for o in shared)]
        via: dict[str, list[str]] = {}
        for h in expanded.terms:
            if h.found.lower() in shared:
                continue
            forms = [f for f in h.other if any(t in words for t in tokenize(f))]
            if forms:
                via.setdefault(h.found, []).extend(f for f in forms if f not in via.get(h.found, []))
        labels = _WHY_LABELS[lang]
        parts = []
        if shared:
            parts.append(labels[0] + ", ".join(shared[:8]))
        if via:
            parts.append(labels[1] + ", ".join(f"{k} → {'/'.join(v[:3])}" for k, v in list(via.items())[:4]))
        return "; ".join(parts) or labels[2]


_WHY_LABELS: dict[Language, tuple[str, str, str]] = {
    "en": ("question terms: ", "via glossary: ", "similar wording"),
    "zh": ("问题中的词：", "词表对应：", "表述相近"),
}


__all__ = [
    "ExpandedQuestion",
    "QuestionMatcher",
    "QuestionParams",
    "QuestionResult",
    "expand",
    "is_deployment_question",
    "looks_like_question",
    "question_language",
]
