"""Tune the question matcher (bot/diagnosis/question.py QuestionParams) on the 'tune' half of the question set.

    .venv/bin/python scripts/tune_questions.py [--split tune]

Retrieval runs once per question (BM25 + MiniLM on the real index); the grid over weights and thresholds
is scored offline. Objective, in order: no confident-wrong answer, top-1, then the share of 'match'
verdicts. Report the chosen values on the other half with `vllm-doctor eval` (docs/language.md).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bot.diagnosis.distill import distill  # noqa: E402
from bot.diagnosis.question import QuestionMatcher, QuestionParams, looks_like_question  # noqa: E402
from bot.evaluation.question_eval import load_questions  # noqa: E402
from bot.pipeline import Pipeline  # noqa: E402


class _Recorded:
    """The index's answers for each query, asked once and replayed for every grid point."""

    def __init__(self, index: object) -> None:
        self.index = index
        self.cache: dict[tuple[str, str], list[object]] = {}

    def dense_search(self, query: str, k: int = 10) -> list[object]:
        key = ("dense", query)
        if key not in self.cache:
            self.cache[key] = list(self.index.dense_search(query, k=k))  # type: ignore[attr-defined]
        return self.cache[key]

    def lexical_search(self, query: str, k: int = 10) -> list[object]:
        key = ("lexical", query)
        if key not in self.cache:
            self.cache[key] = list(self.index.lexical_search(query, k=k))  # type: ignore[attr-defined]
        return self.cache[key]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="tune")
    args = ap.parse_args()
    doctor = Pipeline.from_settings()
    questions = [q for q in load_questions(REPO / "tests" / "eval" / "questions.jsonl") if q.split == args.split]
    # questions that quote an exact error go to the log flow (signatures); they are not the matcher's
    def signature_hit(text: str) -> bool:
        distilled = distill(text)
        return bool(doctor.matcher.scanner.scan(distilled.cleaned or distilled.evidence))

    asked = [q for q in questions if looks_like_question(q.text) and not signature_hit(q.text)]
    recorded = _Recorded(doctor.index)
    base = QuestionMatcher(doctor.kb, recorded, doctor.question_matcher.glossary)
    for q in asked:
        base.match(q.text)
    rows = []
    grid = itertools.product((0.3, 0.45, 0.6), (8.0, 12.0, 16.0), (0.6, 0.7, 0.8), (0.1, 0.15, 0.2), (False, True))
    for dw, sat, thr, margin, agree in grid:
        params = replace(QuestionParams(), dense_weight=dw, bm25_weight=1 - dw, bm25_saturation=sat,
                         match_threshold=thr, margin=margin, require_agreement=agree)
        matcher = QuestionMatcher(doctor.kb, recorded, base.glossary, params)
        top1 = wrong = matched = 0
        for q in asked:
            r = matcher.match(q.text)
            first = r.matches[0].case_id if r.matches else None
            top1 += first in q.expected
            matched += r.verdict == "match"
            wrong += r.verdict == "match" and first not in q.expected
        rows.append((wrong, -top1, -matched, dw, sat, thr, margin, agree))
    rows.sort()
    print(f"{len(asked)} questions of the '{args.split}' split reach the question matcher")
    print("| dense weight | BM25 saturation | match threshold | margin | agreement | top-1 | match verdicts | "
          "confident-wrong |")
    print("|---|---|---|---|---|---|---|---|")
    for wrong, neg_top1, neg_matched, dw, sat, thr, margin, agree in rows[:12]:
        print(f"| {dw} | {sat} | {thr} | {margin} | {agree} | {-neg_top1}/{len(asked)} | {-neg_matched} | {wrong} |")
    current = QuestionParams()
    for row in rows:
        if row[3:] == (current.dense_weight, current.bm25_saturation, current.match_threshold, current.margin,
                       current.require_agreement):
            print(f"\ndefaults: top-1 {-row[1]}/{len(asked)}, match verdicts {-row[2]}, confident-wrong {row[0]}")


if __name__ == "__main__":
    main()
