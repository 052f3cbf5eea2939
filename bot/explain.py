"""Diagnosis + retrieved KB cases (+ host facts) → an Explanation a tired on-call engineer can act on.

The retrieved cases are the ground truth; the LLM (the team's vLLM server, through bot.llm) only words
them for this log, in the asker's language. Every path ends in an Explanation:

    settings without VLLM_BASE_URL  → Explainer.from_settings() is None → callers use kb_only_explanation()
    circuit open (server failing)   → KB answer at once, note says why (no network)
    cache hit (model, prompt hash)  → the earlier LLM answer
    server fault / timeout / stall  → KB answer within llm_timeout_s, one-line note
    invalid JSON, unknown case id,
    empty answer                    → KB answer, note says what was wrong with the LLM's answer

Grounding: the server is asked for JSON constrained by a schema whose case_id is an enum of the
retrieved ids plus "none" (OpenAI `response_format` json_schema; vLLM compiles it with xgrammar, which
works on the CPU build too). The answer is validated again here, because a server may ignore the schema
(llm_structured_outputs=off, or one that rejects it in auto mode).

Context budget: the prompt is rendered with all evidence, measured with vLLM's /tokenize (exact, chat
template included; a conservative estimate for servers without it) and trimmed until prompt plus answer
fit the served max_model_len. A prompt that cannot fit is never sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jinja2

from bot.errors import ConfigError, LLMUnavailable
from bot.llm import ChatResult, LLMClient, ServerInfo
from bot.models import Diagnosis, LogLine
from bot.redact import redact

if TYPE_CHECKING:
    from bot.settings import Settings
    from kb.schema import Case

Confidence = Literal["low", "medium", "high"]
Language = Literal["en", "zh"]
CONFIDENCES: tuple[str, ...] = ("low", "medium", "high")
LANGUAGE_NAMES = {"en": "English", "zh": "Simplified Chinese (简体中文)"}
MAX_CASES = 3

# Limits on what goes into the prompt and what comes back.
MAX_EVIDENCE_LINES = 80
MAX_LINE_CHARS = 400
MAX_HOST_FACTS = 30
MAX_FACT_CHARS = 300
SUMMARY_MAX, WHY_MAX, STEP_MAX, STEPS_MAX = 300, 800, 300, 6
MIN_ANSWER_TOKENS = 192  # below this an answer is not worth asking for
# Schema string limits are sized so that any schema-valid answer fits in max_tokens: a model that never
# stops writing (as the random-weight test model does) then still produces complete, valid JSON.
CHARS_PER_ANSWER_TOKEN = 2.0
JSON_OVERHEAD_CHARS = 160
# Faults that say the server is unusable; they count towards opening the circuit.
_BREAKER_KINDS = {
    "connection",
    "timeout",
    "stalled",
    "server_error",
    "overloaded",
    "auth",
    "unknown_model",
    "bad_response",
}

log = logging.getLogger(__name__)
PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


# --- the value -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Explanation:
    case_id: str  # one of the retrieved case ids, or "none"
    summary: str
    why: str
    fix_steps: list[str]
    confidence: Confidence
    language: Language
    source: Literal["llm", "kb"]
    note: str | None = None  # one line: why this is a KB-only answer, or anything the reader should know
    model: str | None = None
    cached: bool = False
    timings: dict[str, float] = field(
        default_factory=dict, compare=False
    )  # ms: prepare, llm, validate, total

    def text(self) -> str:
        """Plain text: summary, why, numbered steps (what the stream previews while it is written)."""
        parts = [p for p in (self.summary, self.why) if p]
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(self.fix_steps, 1))
        return "\n\n".join([*parts, steps] if steps else parts)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["timings"] = {k: round(v, 1) for k, v in self.timings.items()}
        return out


# --- KB-only answer ---------------------------------------------------------------------------------
_NO_MATCH = {
    "en": (
        "No case in the knowledge base explains this log with confidence.",
        [
            "Share the log from start-up to the first error, with `pip show vllm torch` and `nvidia-smi` output.",
            "Run /vllm-diagnose on the host to collect GPU, driver and memory facts.",
            "When you find the fix, add it as a KB case so the next person gets an answer.",
        ],
    ),
    "zh": (
        "知识库中没有能可靠解释这段日志的案例。",
        [
            "请提供从启动到第一个报错的完整日志，以及 `pip show vllm torch` 和 `nvidia-smi` 的输出。",
            "在该主机上运行 /vllm-diagnose，收集 GPU、驱动和内存信息。",
            "找到解决办法后，请把它添加为知识库案例，方便下一位同事。",
        ],
    ),
}
_VERDICT_CONFIDENCE: dict[str, Confidence] = {"match": "high", "uncertain": "medium", "unknown": "low"}


def resolve_language(diagnosis: Diagnosis, requested: str | None, setting: str = "auto") -> Language:
    """Explicit request (the asker) > a forced setting > the language of the paste's surrounding text."""
    for choice in (requested, setting):
        if choice in ("en", "zh"):
            return choice  # type: ignore[return-value]
    return "zh" if diagnosis.distilled.language == "zh" else "en"


def _step_text(step: Any) -> str:
    text = " ".join(str(step.text).split())
    return f"{text} `{step.command}`" if getattr(step, "command", None) else text


def kb_only_explanation(
    diagnosis: Diagnosis,
    cases: Sequence[Case],
    language: str | None = None,
    note: str | None = None,
    *,
    setting: str = "auto",
) -> Explanation:
    """The answer straight from the best retrieved case; no LLM involved."""
    lang = resolve_language(diagnosis, language, setting)
    best = cases[0] if cases else None
    if best is None or diagnosis.verdict == "unknown":
        summary, steps = _NO_MATCH[lang]
        return Explanation("none", summary, "", list(steps), "low", lang, "kb", note)
    summary = best.title_zh if lang == "zh" else best.title
    return Explanation(
        case_id=best.id,
        summary=summary,
        why=" ".join(best.cause.split()),
        fix_steps=[_step_text(s) for s in best.fix],
        confidence=_VERDICT_CONFIDENCE.get(diagnosis.verdict, "low"),
        language=lang,
        source="kb",
        note=note,
    )


# --- circuit breaker and cache ----------------------------------------------------------------------
class CircuitBreaker:
    """closed → (N consecutive failures) → open → (cool-down passed) → half-open: one trial request;
    its success closes the circuit, its failure opens it again for another cool-down."""

    def __init__(self, failures: int = 3, cooldown_s: float = 30.0, clock: Any = time.monotonic):
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False
        self.last_reason = ""

    @property
    def state(self) -> Literal["closed", "open", "half-open"]:
        with self._lock:
            return self._state()

    def _state(self) -> Literal["closed", "open", "half-open"]:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.cooldown_s:
            return "half-open"
        return "open"

    def allow(self) -> bool:
        with self._lock:
            state = self._state()
            if state == "closed":
                return True
            if state == "half-open" and not self._trial_in_flight:
                self._trial_in_flight = True
                return True
            return False

    def retry_in_s(self) -> float:
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_in_flight = False

    def failure(self, reason: str) -> None:
        with self._lock:
            self._failures += 1
            self.last_reason = reason
            if self._trial_in_flight or self._failures >= self.threshold:
                self._opened_at = self._clock()
            self._trial_in_flight = False

    def release(self) -> None:
        """The trial ended without telling anything about the server (e.g. our prompt did not fit)."""
        with self._lock:
            self._trial_in_flight = False


class AnswerCache:
    """In-memory LRU of LLM explanations keyed by (model, prompt hash). Thread-safe."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[tuple[str, str], Explanation] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str]) -> Explanation | None:
        if self.size <= 0:
            return None
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: tuple[str, str], value: Explanation) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


# --- prompt -----------------------------------------------------------------------------------------
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
    undefined=jinja2.StrictUndefined,
    autoescape=False,  # plain-text prompts, not HTML  # noqa: S701
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["first_sentence"] = lambda text: re.split(
    r"(?<=[.!?。])\s", " ".join(str(text).split()), maxsplit=1
)[0]


@dataclass(frozen=True)
class _CaseItem:
    case: Any
    score: float | None
    signature_hit: bool
    brief: bool = False  # title and first sentence of the cause only (to save context)


@dataclass
class _Draft:
    diagnosis: Diagnosis
    items: list[_CaseItem]
    ordered: list[LogLine]  # evidence lines in the order they survive trimming
    facts: list[str]
    lang: Language
    allowed_ids: tuple[str, ...]
    messages: list[dict[str, str]]  # the prompt with everything in it


@dataclass
class Prompt:
    messages: list[dict[str, str]]
    schema: dict[str, Any]
    allowed_ids: tuple[str, ...]
    evidence_kept: int
    evidence_total: int
    prompt_tokens: int
    counted: bool  # True: exact count from /tokenize; False: estimate
    max_tokens: int


@dataclass(frozen=True)
class AnswerLimits:
    summary: int
    why: int
    step: int
    steps: int = STEPS_MAX

    @classmethod
    def for_tokens(cls, max_tokens: int) -> AnswerLimits:
        chars = max(200, int(max_tokens * CHARS_PER_ANSWER_TOKEN) - JSON_OVERHEAD_CHARS)
        return cls(
            summary=min(SUMMARY_MAX, int(chars * 0.12)),
            why=min(WHY_MAX, int(chars * 0.33)),
            step=min(STEP_MAX, int(chars * 0.55) // STEPS_MAX),
        )


DEFAULT_LIMITS = AnswerLimits(SUMMARY_MAX, WHY_MAX, STEP_MAX)


def answer_schema(allowed_ids: Sequence[str], limits: AnswerLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """JSON schema of the answer; the server constrains decoding with it, we validate against it."""
    text = {"type": "string", "minLength": 1}
    return {
        "type": "object",
        "properties": {
            "case_id": {"type": "string", "enum": list(allowed_ids)},
            "summary": {**text, "maxLength": limits.summary},
            "why": {**text, "maxLength": limits.why},
            "fix_steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": limits.steps,
                "items": {**text, "maxLength": limits.step},
            },
            "confidence": {"type": "string", "enum": list(CONFIDENCES)},
        },
        "required": ["case_id", "summary", "why", "fix_steps", "confidence"],
        "additionalProperties": False,
    }


def _host_fact_lines(host_facts: Mapping[str, Any] | Iterable[str] | None) -> list[str]:
    if not host_facts:
        return []
    if isinstance(host_facts, Mapping):
        raw = [f"{k}: {v}" for k, v in host_facts.items()]
    else:
        raw = [str(x) for x in host_facts]
    out = []
    for fact in raw[:MAX_HOST_FACTS]:
        fact = " ".join(redact(fact).split())
        out.append(fact if len(fact) <= MAX_FACT_CHARS else fact[: MAX_FACT_CHARS - 1] + "…")
    return out


def _clip_line(line: LogLine) -> LogLine:
    text = redact(line.text)  # distill already redacts; a second pass is cheap and protects hand-built input
    if len(text) > MAX_LINE_CHARS:
        text = text[: MAX_LINE_CHARS - 1] + "…"
    return LogLine(line.line_no, text, line.kind)


def _evidence_by_priority(lines: Sequence[LogLine]) -> list[LogLine]:
    """Order in which lines survive trimming: error lines, then the last stack frames, then context
    lines nearest to an error line."""
    roots = [ln.line_no for ln in lines if ln.kind == "root"]

    def distance(ln: LogLine) -> int:
        return min((abs(ln.line_no - r) for r in roots), default=0)

    def key(ln: LogLine) -> tuple[int, int]:
        if ln.kind == "root":
            return (0, -ln.line_no)
        if ln.kind == "frame":
            return (1, -ln.line_no)
        return (2, distance(ln))

    return sorted(lines, key=key)


def _select(ordered: Sequence[LogLine], char_budget: int) -> list[LogLine]:
    kept, used = [], 0
    for ln in ordered:
        cost = len(ln.text) + 8
        if kept and used + cost > char_budget:
            continue
        if not kept and cost > char_budget:
            # even the most important line is too long: keep its tail, where the message usually is
            keep = max(40, char_budget - 8)
            ln = LogLine(ln.line_no, "…" + ln.text[-keep:], ln.kind)
            cost = len(ln.text) + 8
        kept.append(ln)
        used += cost
    return sorted(kept, key=lambda ln: ln.line_no)


def estimate_tokens(messages: list[dict[str, str]]) -> int:
    """Conservative token estimate for servers without /tokenize: 1 token per CJK character, one per
    2.5 other characters, plus chat-template overhead."""
    total = 0
    for m in messages:
        text = m["content"]
        cjk = len(re.findall(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]", text))
        total += cjk + math.ceil((len(text) - cjk) / 2.5) + 8
    return total + 8


# --- answer validation ------------------------------------------------------------------------------
class AnswerRejected(ValueError):
    """The LLM answered, but not with something we can show. str() is the one-line reason."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise AnswerRejected(f"expected text, got {type(value).__name__}")
    text = " ".join(_CONTROL.sub(" ", value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_answer(text: str, allowed_ids: Sequence[str]) -> dict[str, Any]:
    """Validate the LLM's JSON. Raises AnswerRejected with a one-line reason."""
    stripped = text.strip()
    if not stripped:
        raise AnswerRejected("the LLM returned an empty answer")
    # Without schema enforcement a model may wrap the object in a ``` fence; accept exactly that much.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", stripped, re.S)
    if fenced:
        stripped = fenced.group(1)
    try:
        # strict=False: xgrammar lets raw control characters into JSON strings; _clean removes them
        data = json.loads(stripped, strict=False)
    except json.JSONDecodeError as exc:
        raise AnswerRejected(f"the LLM's answer is not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict):
        raise AnswerRejected("the LLM's answer is not a JSON object")
    case_id = data.get("case_id")
    if not isinstance(case_id, str) or case_id.strip() not in allowed_ids:
        raise AnswerRejected(f"the LLM cited case {str(case_id)[:60]!r}, which was not retrieved")
    summary = _clean(data.get("summary", ""), SUMMARY_MAX)
    why = _clean(data.get("why", ""), WHY_MAX)
    raw_steps = data.get("fix_steps", [])
    if isinstance(raw_steps, str):
        raw_steps = [raw_steps]
    if not isinstance(raw_steps, list):
        raise AnswerRejected("fix_steps is not a list")
    steps = [s for s in (_clean(x, STEP_MAX) for x in raw_steps[:STEPS_MAX]) if s]
    if not summary:
        raise AnswerRejected("the LLM's answer has an empty summary")
    if not steps:
        raise AnswerRejected("the LLM's answer has no fix steps")
    confidence = str(data.get("confidence", "")).strip().lower()
    return {
        "case_id": case_id.strip(),
        "summary": summary,
        "why": why,
        "fix_steps": steps,
        "confidence": confidence if confidence in CONFIDENCES else "low",
    }


# --- streaming preview ------------------------------------------------------------------------------
class PreviewScanner:
    """Turns the JSON answer, chunk by chunk, into readable text deltas: summary, why, then numbered
    fix steps, in the order the model writes them. Incremental: each character is looked at once."""

    _SHOWN = {"summary", "why"}

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False
        self._unicode: str | None = None
        self._high_surrogate: int | None = None
        self._is_key = False
        self._expect_key = False
        self._key_buf: list[str] = []
        self._key = ""
        self._emitting = False
        self._steps = 0
        self._written = False
        self.text = ""

    def feed(self, chunk: str) -> str:
        out: list[str] = []
        for ch in chunk:
            if self._in_string:
                self._string_char(ch, out)
            elif ch == '"':
                self._open_string(out)
            elif ch in "{[":
                self._stack.append(ch)
                self._expect_key = ch == "{"
            elif ch in "}]":
                if self._stack:
                    self._stack.pop()
                self._expect_key = False
            elif ch == ":":
                self._expect_key = False
            elif ch == ",":
                self._expect_key = bool(self._stack) and self._stack[-1] == "{"
        delta = "".join(out)
        self.text += delta
        return delta

    def _open_string(self, out: list[str]) -> None:
        self._in_string = True
        self._is_key = self._expect_key
        self._key_buf = []
        depth = len(self._stack)
        self._emitting = False
        if self._is_key:
            return
        if depth == 1 and self._key in self._SHOWN:
            self._emitting = True
            if self._written:
                out.append("\n\n")
        elif depth == 2 and self._key == "fix_steps" and self._stack[-1] == "[":
            self._emitting = True
            self._steps += 1
            out.append(("\n\n" if self._steps == 1 else "\n") if self._written else "")
            out.append(f"{self._steps}. ")
        if self._emitting:
            self._written = True

    def _string_char(self, ch: str, out: list[str]) -> None:
        if self._unicode is not None:
            self._unicode += ch
            if len(self._unicode) == 4:
                try:
                    code = int(self._unicode, 16)
                except ValueError:
                    code = 0x20
                self._unicode = None
                if 0xD800 <= code <= 0xDBFF:  # first half of a surrogate pair (\ud83d\ude00 = one emoji)
                    self._high_surrogate = code
                    return
                if 0xDC00 <= code <= 0xDFFF:
                    if self._high_surrogate is not None:
                        self._char(
                            chr(0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)), out
                        )
                    self._high_surrogate = None
                    return  # a lone half cannot be shown
                self._high_surrogate = None
                self._char(chr(code), out)
            return
        if self._escape:
            self._escape = False
            if ch == "u":
                self._unicode = ""
                return
            self._char({"n": " ", "t": " ", "r": " ", "b": "", "f": ""}.get(ch, ch), out)
            return
        if ch == "\\":
            self._escape = True
        elif ch == '"':
            self._in_string = False
            if self._is_key:
                self._key = "".join(self._key_buf)
                self._expect_key = False
        else:
            self._char(" " if _CONTROL.match(ch) else ch, out)

    def _char(self, ch: str, out: list[str]) -> None:
        if self._is_key:
            self._key_buf.append(ch)
        elif self._emitting:
            out.append(ch)


# --- the explainer ----------------------------------------------------------------------------------
class Explainer:
    """Explains diagnoses with the team's vLLM server; never raises for LLM trouble."""

    def __init__(
        self,
        client: LLMClient,
        *,
        timeout_s: float = 20.0,
        stall_s: float = 10.0,
        language: str = "auto",
        max_answer_tokens: int = 768,
        structured: str = "auto",
        breaker: CircuitBreaker | None = None,
        cache: AnswerCache | None = None,
    ):
        self.client = client
        self.timeout_s = timeout_s
        self.stall_s = min(stall_s, timeout_s)
        self.language = language
        self.max_answer_tokens = max_answer_tokens
        self.structured = structured
        self._schema_rejected = False
        self.breaker = breaker or CircuitBreaker()
        self.cache = cache if cache is not None else AnswerCache()

    @classmethod
    def from_settings(cls, settings: Settings) -> Explainer | None:
        """None when no LLM is configured: callers answer from the KB alone, without an error."""
        url = (settings.vllm_base_url or "").strip()
        if not url:
            return None
        if not re.match(r"^https?://[^\s/]+", url):
            raise ConfigError(
                f"VLLM_BASE_URL must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
            )
        client = LLMClient(url, api_key=settings.vllm_api_key, model=settings.vllm_model)
        return cls(
            client,
            timeout_s=settings.llm_timeout_s,
            stall_s=settings.llm_stall_timeout_s,
            language=settings.llm_language,
            max_answer_tokens=settings.llm_max_answer_tokens,
            structured=settings.llm_structured_outputs,
            breaker=CircuitBreaker(settings.llm_breaker_failures, settings.llm_breaker_cooldown_s),
            cache=AnswerCache(settings.llm_cache_size),
        )

    # -- public API --------------------------------------------------------------------------------
    def explain(
        self,
        diagnosis: Diagnosis,
        cases: Sequence[Case],
        *,
        host_facts: Mapping[str, Any] | Iterable[str] | None = None,
        language: str | None = None,
    ) -> Explanation:
        final: Explanation | None = None
        for item in self._run(diagnosis, cases, host_facts, language, streaming=False):
            if isinstance(item, Explanation):
                final = item
        assert final is not None
        return final

    def stream(
        self,
        diagnosis: Diagnosis,
        cases: Sequence[Case],
        *,
        host_facts: Mapping[str, Any] | Iterable[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str | Explanation]:
        """Partial text (str deltas to append) while the LLM writes, then exactly one Explanation, which
        is authoritative: on a fault mid-stream it is the KB answer and the partial text is void."""
        yield from self._run(diagnosis, cases, host_facts, language, streaming=True)

    # -- internals ---------------------------------------------------------------------------------
    def _run(
        self,
        diagnosis: Diagnosis,
        cases: Sequence[Case],
        host_facts: Mapping[str, Any] | Iterable[str] | None,
        language: str | None,
        *,
        streaming: bool,
    ) -> Iterator[str | Explanation]:
        started = time.monotonic()
        deadline = started + self.timeout_s
        cases = list(cases)[:MAX_CASES]
        lang = resolve_language(diagnosis, language, self.language)
        draft = self._draft(diagnosis, cases, host_facts, lang)

        def ms() -> float:
            return (time.monotonic() - started) * 1000

        def fallback(note: str) -> Explanation:
            return _with_timings(kb_only_explanation(diagnosis, cases, lang, note), total_ms=ms())

        def cached(info: ServerInfo | None) -> Explanation | None:
            return self.cache.get(self._cache_key(draft, info)) if info is not None else None

        if not self.breaker.allow():
            hit = cached(self.client.cached_info)
            if hit is not None:
                yield from _replay(hit, streaming, total_ms=ms())
                return
            yield fallback(
                f"LLM skipped after {self.breaker.threshold} failures in a row (last: {self.breaker.last_reason}); "
                f"next try in {self.breaker.retry_in_s():.0f} s. Answer from the knowledge base."
            )
            return

        settled = False  # whether the breaker has heard how this request went
        timings: dict[str, float] = {}
        try:
            info = self.client.server_info(deadline)
            hit = cached(info)
            if hit is not None:
                self.breaker.success()
                settled = True
                yield from _replay(hit, streaming, total_ms=ms())
                return
            prompt = self._fit(draft, info, deadline)
            timings["prepare_ms"] = ms()
            result = ChatResult()
            llm_started = time.monotonic()
            if streaming:
                scanner = PreviewScanner()
                for piece in self._call(prompt, info, deadline, result, streaming=True):
                    delta = scanner.feed(piece)
                    if delta:
                        yield delta
            else:
                for _ in self._call(prompt, info, deadline, result, streaming=False):
                    pass
            timings["llm_ms"] = (time.monotonic() - llm_started) * 1000
            if result.first_chunk_ms is not None:
                timings["first_chunk_ms"] = result.first_chunk_ms
        except LLMUnavailable as exc:
            if exc.kind in _BREAKER_KINDS:
                self.breaker.failure(str(exc))
                settled = True
            yield fallback(f"LLM unavailable ({exc}); answer from the knowledge base.")
            return
        except Exception:  # a bug here must not cost the user the KB answer
            log.exception("explanation failed")
            yield fallback("LLM step failed with an internal error (logged); answer from the knowledge base.")
            return
        finally:
            if not settled:
                self.breaker.release()
        self.breaker.success()  # the server answered; what it said is judged below

        validate_started = time.monotonic()
        try:
            if result.finish_reason == "length":
                raise AnswerRejected(f"the LLM's answer was cut off at {prompt.max_tokens} tokens")
            fields = parse_answer(result.text, prompt.allowed_ids)
        except AnswerRejected as exc:
            yield fallback(f"LLM answer discarded: {exc}; answer from the knowledge base.")
            return
        timings["validate_ms"] = (time.monotonic() - validate_started) * 1000
        timings["total_ms"] = ms()
        explanation = Explanation(
            **fields, language=lang, source="llm", note=None, model=info.model, timings=timings
        )
        self.cache.put(self._cache_key(draft, info), explanation)
        yield explanation

    def _call(
        self, prompt: Prompt, info: ServerInfo, deadline: float, result: ChatResult, *, streaming: bool
    ) -> Iterator[str]:
        """Chat with the schema when allowed; in auto mode a server that rejects the schema is asked
        again without it (and not asked with it again by this process)."""
        use_schema = self.structured == "on" or (self.structured == "auto" and not self._schema_rejected)
        try:
            yield from self._chat(prompt, info, deadline, result, streaming, use_schema)
        except LLMUnavailable as exc:
            if not (
                exc.kind == "unsupported" and use_schema and self.structured == "auto" and not result.text
            ):
                raise
            self._schema_rejected = True
            yield from self._chat(prompt, info, deadline, result, streaming, False)

    def _chat(
        self,
        prompt: Prompt,
        info: ServerInfo,
        deadline: float,
        result: ChatResult,
        streaming: bool,
        use_schema: bool,
    ) -> Iterator[str]:
        schema = prompt.schema if use_schema else None
        if streaming:
            yield from self.client.chat_stream(
                prompt.messages,
                model=info.model,
                max_tokens=prompt.max_tokens,
                deadline=deadline,
                stall_s=self.stall_s,
                result=result,
                schema=schema,
            )
            return
        out = self.client.chat(
            prompt.messages, model=info.model, max_tokens=prompt.max_tokens, deadline=deadline, schema=schema
        )
        result.text, result.finish_reason = out.text, out.finish_reason
        result.prompt_tokens, result.completion_tokens = out.prompt_tokens, out.completion_tokens

    def _render(
        self,
        draft: _Draft,
        items: Sequence[_CaseItem],
        evidence: Sequence[LogLine],
        facts: Sequence[str],
        *,
        trimmed: bool,
    ) -> list[dict[str, str]]:
        language_name = LANGUAGE_NAMES[draft.lang]
        system = _env.get_template("explain_system.j2").render(
            language_name=language_name, allowed_ids=draft.allowed_ids
        )
        user = _env.get_template("explain_user.j2").render(
            verdict=draft.diagnosis.verdict,
            best_id=items[0].case.id if items else None,
            evidence=evidence,
            total_lines=draft.diagnosis.distilled.total_lines,
            trimmed=trimmed,
            cases=items,
            host_facts=facts,
            language_name=language_name,
        )
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]

    def _draft(
        self,
        diagnosis: Diagnosis,
        cases: Sequence[Case],
        host_facts: Mapping[str, Any] | Iterable[str] | None,
        lang: Language,
    ) -> _Draft:
        """Everything the prompt may hold, redacted and clipped; no network."""
        scores = {m.case_id: m for m in diagnosis.matches}
        items = [
            _CaseItem(
                c,
                scores[c.id].score if c.id in scores else None,
                bool(c.id in scores and scores[c.id].signature_hit),
            )
            for c in cases
        ]
        lines = [_clip_line(ln) for ln in diagnosis.distilled.evidence]
        ordered = _evidence_by_priority(lines)[:MAX_EVIDENCE_LINES]
        allowed = tuple([c.id for c in cases] + ["none"])
        draft = _Draft(diagnosis, items, ordered, _host_fact_lines(host_facts), lang, allowed, [])
        evidence = sorted(ordered, key=lambda ln: ln.line_no)
        draft.messages = self._render(draft, items, evidence, draft.facts, trimmed=len(evidence) < len(lines))
        return draft

    def _cache_key(self, draft: _Draft, info: ServerInfo) -> tuple[str, str]:
        blob = json.dumps(
            {
                "messages": draft.messages,
                "ids": draft.allowed_ids,
                "lang": draft.lang,
                "ctx": info.max_model_len,
                "answer": self.max_answer_tokens,
                "schema": self.structured != "off" and not self._schema_rejected,
            },
            sort_keys=True,
            ensure_ascii=False,
        )
        return info.model, hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _fit(self, draft: _Draft, info: ServerInfo, deadline: float) -> Prompt:
        """Shrink the draft until prompt + answer fit max_model_len, measuring with /tokenize.

        Order of sacrifice: log lines (least important first), then the detail of the runner-up cases,
        then the runner-up cases, then host facts. If even the best case alone leaves less than the
        wanted answer length, the answer gets what is left (at least MIN_ANSWER_TOKENS); otherwise the
        request is not sent at all."""
        ctx = info.max_model_len
        wanted = min(self.max_answer_tokens, ctx // 2)

        def measure(messages: list[dict[str, str]]) -> tuple[int, bool]:
            estimate = estimate_tokens(messages)
            if 2 * estimate + wanted <= ctx:
                return estimate, False  # fits even if the estimate is off by 2x: skip the round trip
            exact = self.client.count_tokens(messages, info.model, deadline)
            return (exact, True) if exact is not None else (estimate, False)

        def done(messages: list[dict[str, str]], tokens: int, counted: bool, kept: int) -> Prompt:
            max_tokens = min(wanted, ctx - tokens)
            return Prompt(
                messages=messages,
                schema=answer_schema(draft.allowed_ids, AnswerLimits.for_tokens(max_tokens)),
                allowed_ids=draft.allowed_ids,
                evidence_kept=kept,
                evidence_total=len(draft.diagnosis.distilled.evidence),
                prompt_tokens=tokens,
                counted=counted,
                max_tokens=max_tokens,
            )

        tokens, counted = measure(draft.messages)
        if tokens + wanted <= ctx:
            return done(draft.messages, tokens, counted, len(draft.ordered))

        full_items = draft.items
        levels = [
            (full_items, draft.facts),
            ([full_items[0], *(replace(i, brief=True) for i in full_items[1:])], draft.facts),
            (full_items[:1], draft.facts),
            (full_items[:1], []),
        ]
        if not full_items:
            levels = [([], draft.facts), ([], [])]
        for items, facts in levels:
            bare = self._render(draft, items, [], facts, trimmed=True)
            base, counted = measure(bare)
            room = ctx - wanted - base
            if room < 0:
                continue
            # What the evidence cost in the full prompt tells how many of its characters fit in `room`.
            evidence_chars = sum(len(ln.text) + 8 for ln in draft.ordered) or 1
            ratio = 0.95 * room / max(1, tokens - base)
            for _attempt in range(4):
                chosen = _select(draft.ordered, int(evidence_chars * ratio))
                if not chosen:
                    break
                candidate = self._render(draft, items, chosen, facts, trimmed=True)
                cand_tokens, cand_counted = measure(candidate)
                if cand_tokens + wanted <= ctx:
                    return done(candidate, cand_tokens, cand_counted, len(chosen))
                ratio *= 0.9 * room / max(1, cand_tokens - base)
            return done(bare, base, counted, 0)  # better an answer without log lines than none
        # Nothing fits next to a full-length answer: give the answer whatever the smallest prompt leaves.
        if ctx - base >= MIN_ANSWER_TOKENS:
            return done(bare, base, counted, 0)
        raise LLMUnavailable(
            f"the prompt does not fit the model's context ({base} tokens with one case and no log lines; "
            f"max_model_len {ctx})",
            kind="prompt_too_long",
        )


def _replay(hit: Explanation, streaming: bool, **timings: float) -> Iterator[str | Explanation]:
    if streaming:
        yield hit.text()
    yield _with_timings(_replace(hit, cached=True, timings={}), **timings)


def _replace(exp: Explanation, **changes: Any) -> Explanation:
    data = {**exp.__dict__, **changes}
    return Explanation(**data)


def _with_timings(exp: Explanation, **timings: float) -> Explanation:
    clean = {k if k.endswith("_ms") else f"{k}_ms": v for k, v in timings.items()}
    return _replace(exp, timings={**exp.timings, **clean})
