"""Question set scoring for `vllm-doctor eval` (tests/eval/questions.jsonl), beside the log set.

Each line: {"id", "language": "zh"|"en", "question", "expected": [case ids], "split": "tune"|"report"}.
Any expected id counts as right (generic questions such as "显存不足怎么办" have several). Groups:
zh (all Chinese), zh-pure (no Latin letter at all), en; per split, so the gap between the half the
question matcher was tuned on and the half it was not is visible.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import UserInputError

_LATIN = re.compile(r"[A-Za-z]")


@dataclass(frozen=True)
class Question:
    id: str
    language: str
    text: str
    expected: tuple[str, ...]
    split: str

    @property
    def groups(self) -> tuple[str, ...]:
        if self.language == "zh":
            return ("zh", "zh-pure") if not _LATIN.search(self.text) else ("zh",)
        return ("en",)


@dataclass
class QuestionScore:
    group: str
    split: str
    n: int = 0
    top1: int = 0
    top3: int = 0
    matched: int = 0
    confident_wrong: int = 0
    misses: list[str] = field(default_factory=list)

    def row(self) -> dict[str, float | int | str]:
        n = self.n or 1
        return {
            "group": self.group,
            "split": self.split,
            "n": self.n,
            "top1": round(self.top1 / n, 3),
            "top3": round(self.top3 / n, 3),
            "match_rate": round(self.matched / n, 3),
            "confident_wrong": self.confident_wrong,
        }


def load_questions(path: Path) -> list[Question]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj: dict[str, Any] = json.loads(line)
            out.append(
                Question(str(obj["id"]), str(obj["language"]), str(obj["question"]),
                         tuple(obj["expected"]), str(obj.get("split", "report")))
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise UserInputError(f"{path}:{n}: not a question line ({exc})") from exc
    return out


def score_questions(doctor: Any, questions: list[Question]) -> list[QuestionScore]:
    """One row per (group, split) and per (group, all), plus 'all'."""
    table: dict[tuple[str, str], QuestionScore] = {}
    for q in questions:
        diagnosis = doctor.match(q.text)
        ranked = [m.case_id for m in diagnosis.matches]
        first = ranked[0] if ranked else None
        for group in (*q.groups, "all"):
            for split in (q.split, "all"):
                s = table.setdefault((group, split), QuestionScore(group, split))
                s.n += 1
                s.top1 += first in q.expected
                s.top3 += any(c in q.expected for c in ranked[:3])
                s.matched += diagnosis.verdict == "match"
                wrong = diagnosis.verdict == "match" and first not in q.expected
                s.confident_wrong += wrong
                if (first not in q.expected or wrong) and split == "all" and group == "all":
                    s.misses.append(f"{q.id} [{diagnosis.verdict}] {q.text!r}: got {ranked[:3]}, want {list(q.expected)}")
    order = {"zh-pure": 0, "zh": 1, "en": 2, "all": 3}
    return sorted(table.values(), key=lambda s: (order.get(s.group, 9), s.split))


def format_question_table(scores: list[QuestionScore]) -> str:
    lines = [
        "| questions | split | n | top-1 | top-3 | match verdicts | confident-wrong |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        r = s.row()
        lines.append(
            f"| {r['group']} | {r['split']} | {r['n']} | {r['top1']:.3f} | {r['top3']:.3f} | "
            f"{r['match_rate']:.3f} | {r['confident_wrong']} |"
        )
    return "\n".join(lines)


__all__ = ["Question", "QuestionScore", "format_question_table", "load_questions", "score_questions"]
