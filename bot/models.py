"""Values that flow one way through the pipeline: raw text → Distilled → Diagnosis → (Explanation) → reply.

Frozen dataclasses only; no behaviour that talks to the outside world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["match", "uncertain", "unknown"]
# Logger level of a line, read from the prefix that cleaning removed ("" = no level prefix).
LogLevel = Literal["", "debug", "info", "warning", "error"]


@dataclass(frozen=True)
class LogLine:
    """A cleaned log line with its 1-based line number in the original paste."""

    line_no: int
    text: str
    kind: Literal["root", "frame", "context"] = "context"
    level: LogLevel = ""


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
    truncated: bool = False  # the paste ends inside a traceback: its final exception line is missing


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
    notes: tuple[str, ...] = ()  # e.g. "fixed in vllm 0.6.4; this log shows 0.5.3 — upgrading is the fix"


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    matches: tuple[Match, ...]  # best first, at most 5
    distilled: Distilled
    elapsed_ms: float = 0.0
    # Advisory cases whose signature fired on a paste whose root error they do not explain: shown as
    # "also noticed", never as the answer.
    also_noticed: tuple[Match, ...] = ()
    facts: LogFacts | None = None  # what the log says about the setup (bot/facts.py)
    notes: tuple[str, ...] = ()  # matcher notes, e.g. "the final error line is missing"
    kind: Literal["log", "question"] = "log"  # question: short text without a log (bot/question.py)

    @property
    def best(self) -> Match | None:
        return self.matches[0] if self.matches else None


@dataclass(frozen=True)
class LogFacts:
    """What vLLM, torch and the platform printed about themselves in a paste (read by bot/facts.py).

    Every field is None when the log does not say it. Sizes are GiB; `sources` maps a field name to the
    1-based line number it was read from, so evidence can quote the line. Shared by the explain flow
    (rules over facts, the answer's "what the log says about your setup"), pictures and report drafts.
    """

    vllm_version: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None
    python_version: str | None = None
    model: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None  # "8.0"
    gpu_count: int | None = None
    total_gpu_memory_gib: float | None = None
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    kv_cache_gib: float | None = None
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    max_concurrency: float | None = None
    num_attention_heads: int | None = None
    kv_cache_tokens: int | None = None  # V1 engine: "GPU KV cache size: 445,888 tokens"
    sources: dict[str, int] = field(default_factory=dict)
    quotes: dict[int, str] = field(default_factory=dict)  # line number → the cleaned line a fact came from

    def known(self) -> dict[str, str | int | float | bool]:
        """The facts the log states, in field order (for JSON and the answer)."""
        skip = ("sources", "quotes")
        return {k: v for k, v in self.__dict__.items() if k not in skip and v is not None}
