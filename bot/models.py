"""Values that flow one way through the pipeline: raw text → Distilled → Diagnosis → (Explanation) → reply.

Frozen dataclasses only; no behaviour that talks to the outside world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["match", "uncertain", "unknown"]


@dataclass(frozen=True)
class LogLine:
    """A cleaned log line with its 1-based line number in the original paste."""

    line_no: int
    text: str
    kind: Literal["root", "frame", "context"] = "context"


@dataclass(frozen=True)
class Distilled:
    """What distillation keeps of a paste."""

    evidence: tuple[LogLine, ...]  # lines that matter, in original order (root errors + last frames + context)
    root_errors: tuple[LogLine, ...]  # exception / CUDA error / NCCL WARN lines
    query: str  # masked text (numbers, hex, paths, IPs) for BM25 and the dense encoder
    total_lines: int
    total_bytes: int
    language: Literal["en", "zh"] = "en"  # language of the human text around the log
    notes: tuple[str, ...] = ()  # e.g. "input truncated to the last 2 MB", "decoded as latin-1"
    cleaned: tuple[LogLine, ...] = ()  # all cleaned, de-duplicated lines (for signature scanning)


@dataclass(frozen=True)
class Evidence:
    line_no: int
    text: str
    why: str  # e.g. "signature: No available memory for the cache blocks" or "lexical/dense similarity"


@dataclass(frozen=True)
class Match:
    case_id: str
    title: str
    title_zh: str
    area: str
    score: float  # 0..1, calibrated confidence that this case is the cause
    signature_hit: bool
    evidence: tuple[Evidence, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)  # component scores (signature, bm25, dense, fused)


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    matches: tuple[Match, ...]  # best first, at most 5
    distilled: Distilled
    elapsed_ms: float = 0.0

    @property
    def best(self) -> Match | None:
        return self.matches[0] if self.matches else None
