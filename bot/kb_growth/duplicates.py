"""Is this new case already in the KB? The nearest existing cases, with their similarity.

Similarity is what the running Pipeline would say: each example log of the new case is diagnosed by the
live pipeline (signatures + BM25 + MiniLM over the current index) and a case's similarity is its best
match confidence (0–1) over those logs. A case at or above `threshold` (settings.kb_duplicate_threshold,
the "match" verdict by default) is a likely duplicate: the author chooses "new case" or "add my log as
an example of that case". Signature overlaps found by the linter (bot/kb_growth/lint.py) count too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.errors import UserInputError


@dataclass(frozen=True)
class Similar:
    case_id: str
    title: str
    area: str
    similarity: float  # 0..1: the pipeline's confidence that this case explains the new log
    signature_hit: bool  # one of that case's signatures fires on the new log
    overlap: bool = False  # one of the NEW case's signatures fires on that case's examples

    @property
    def percent(self) -> int:
        return round(self.similarity * 100)


def nearest_cases(
    pipeline: Any,
    logs: Sequence[str],
    *,
    k: int = 3,
    exclude: Iterable[str] = (),
    overlaps: Iterable[str] = (),
) -> list[Similar]:
    """Top k existing cases for these logs, best first. `overlaps`: case ids the linter flagged."""
    excluded = set(exclude)
    best: dict[str, Similar] = {}
    for log in logs:
        if not log.strip():
            continue
        try:
            diagnosis = pipeline.match(log)
        except UserInputError:
            continue
        for m in diagnosis.matches:
            if m.case_id in excluded:
                continue
            prior = best.get(m.case_id)
            if prior is None or m.score > prior.similarity:
                best[m.case_id] = Similar(m.case_id, m.title, m.area, float(m.score), m.signature_hit)
    flagged = set(overlaps) - excluded
    by_id = pipeline.kb.by_id()
    for case_id in flagged:
        if case_id in best:
            s = best[case_id]
            best[case_id] = Similar(s.case_id, s.title, s.area, s.similarity, s.signature_hit, True)
        elif case_id in by_id:
            c = by_id[case_id]
            best[case_id] = Similar(c.id, c.title, c.area, 0.0, False, True)
    ranked = sorted(best.values(), key=lambda s: (s.overlap, s.similarity), reverse=True)
    return ranked[:k]


def likely_duplicates(nearest: Sequence[Similar], threshold: float) -> list[Similar]:
    return [s for s in nearest if s.similarity >= threshold or s.overlap]
