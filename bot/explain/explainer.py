"""Diagnosis + retrieved KB cases (+ host facts) → an Explanation a tired on-call engineer can act on.

The retrieved cases are the ground truth; the LLM (the team's vLLM server, through bot.explain.llm) only words
them for this log, in the asker's language. Every path ends in an Explanation:

    settings without VLLM_BASE_URL  → Explainer.from_settings() is None → callers use kb_only_explanation()
    circuit open (server failing)   → KB answer at once, note says why (no network)
    cache hit (model, prompt hash)  → the earlier LLM answer
    server fault / timeout / stall  → KB answer within llm_timeout_s, one-line note
    invalid JSON, unknown case id,
    empty answer                    → KB answer, note says what was wrong with the LLM's answer

This module holds the KB-only answer and the orchestration (the Explanation value is in bot/models.py);
the parts live next to it:
    bot/explain/prompt.py  prompt rendering from bot/explain/prompts/*.j2, evidence selection, context budget
    bot/explain/answer.py  answer schema (grounding), validation, streaming preview
    bot/explain/resilience.py      circuit breaker and answer cache
The names other modules and tests use are re-exported here, so `from bot.explain.explainer import …` keeps working.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bot.diagnosis.fix_values import fitted_case
from bot.errors import ConfigError, LLMUnavailable
from bot.explain.answer import (
    CONFIDENCES,
    DEFAULT_LIMITS,
    AnswerLimits,
    AnswerRejected,
    PreviewScanner,
    answer_in_language,
    answer_schema,
    parse_answer,
)
from bot.explain.prompt import (
    LANGUAGE_NAMES,
    Draft,
    Prompt,
    build_draft,
    estimate_tokens,
    fit_prompt,
)
from bot.explain.resilience import AnswerCache, CircuitBreaker
from bot.models import Confidence, Diagnosis, Explanation, Language
from bot.ops import metrics
from bot.present.i18n import case_cause, case_summary, step_text, t

if TYPE_CHECKING:
    # openai (~1-2 s to import) loads only when an LLM is configured: a KB-only answer never needs it
    from bot.explain.llm import ChatResult, LLMClient, ServerInfo
    from bot.settings import Settings
    from kb.schema import Case

__all__ = [
    "CONFIDENCES",
    "DEFAULT_LIMITS",
    "LANGUAGE_NAMES",
    "MAX_CASES",
    "AnswerCache",
    "AnswerLimits",
    "AnswerRejected",
    "CircuitBreaker",
    "Confidence",
    "Explainer",
    "Explanation",
    "Language",
    "PreviewScanner",
    "Prompt",
    "answer_schema",
    "estimate_tokens",
    "kb_only_explanation",
    "parse_answer",
    "resolve_language",
]

MAX_CASES = 3
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


def _step_text(step: Any, lang: Language) -> str:
    text = step_text(step, lang)
    return f"{text} `{step.command}`" if getattr(step, "command", None) else text


def _case_commands(draft: Draft) -> set[str]:
    """The commands of the retrieved cases (reviewed in the KB): an LLM step may show them as commands."""
    commands: set[str] = set()
    for item in draft.items:
        for step in item.case.fix:
            if step.command:
                commands.add(step.command.strip())
            for text in (step.text, getattr(step, "text_zh", None) or ""):
                commands.update(m.strip() for m in re.findall(r"`([^`]+)`", text))
    return commands


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
    best = fitted_case(cases[0], diagnosis.fix_values) if cases else None  # commands filled from the log
    if best is None or diagnosis.verdict == "unknown":
        summary, steps = _NO_MATCH[lang]
        return Explanation("none", summary, "", list(steps), "low", lang, "kb", note)
    return Explanation(
        case_id=best.id,
        summary=case_summary(best, lang),
        why=case_cause(best, lang),
        fix_steps=[_step_text(s, lang) for s in best.fix],
        confidence=_VERDICT_CONFIDENCE.get(diagnosis.verdict, "low"),
        language=lang,
        source="kb",
        note=note,
    )


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
        from bot.explain.llm import LLMClient

        client = LLMClient(url, api_key=settings.vllm_api_key, model=settings.vllm_model)
        breaker: Any = CircuitBreaker(settings.llm_breaker_failures, settings.llm_breaker_cooldown_s)
        cache: Any = AnswerCache(settings.llm_cache_size)
        if settings.database_url:  # replicas: one breaker and one cache for all of them
            from bot.explain.resilience_shared import SharedAnswerCache, SharedCircuitBreaker
            from bot.storage import open_database

            shared = open_database(settings.database_url)
            breaker = SharedCircuitBreaker(shared, settings.llm_breaker_failures, settings.llm_breaker_cooldown_s)
            cache = SharedAnswerCache(shared, settings.llm_cache_size)
        return cls(
            client,
            timeout_s=settings.llm_timeout_s,
            stall_s=settings.llm_stall_timeout_s,
            language=settings.llm_language,
            max_answer_tokens=settings.llm_max_answer_tokens,
            structured=settings.llm_structured_outputs,
            breaker=breaker,
            cache=cache,
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
            metrics.LLM_CALLS.labels(outcome="fallback").inc()
            return _with_timings(kb_only_explanation(diagnosis, cases, lang, note), total_ms=ms())

        def cached(info: ServerInfo | None) -> Explanation | None:
            return self.cache.get(self._cache_key(draft, info)) if info is not None else None

        allowed = self.breaker.allow()
        metrics.LLM_BREAKER_OPEN.set(0 if allowed and self.breaker.state == "closed" else 1)
        if not allowed:
            hit = cached(self.client.cached_info)
            if hit is not None:
                metrics.LLM_CALLS.labels(outcome="cached").inc()
                yield from _replay(hit, streaming, total_ms=ms())
                return
            metrics.LLM_CALLS.labels(outcome="skipped").inc()
            yield fallback(
                t(
                    "note.breaker",
                    lang,
                    n=self.breaker.threshold,
                    reason=self.breaker.last_reason,
                    retry=self.breaker.retry_in_s(),
                )
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
                metrics.LLM_CALLS.labels(outcome="cached").inc()
                yield from _replay(hit, streaming, total_ms=ms())
                return
            prompt = fit_prompt(draft, self.client, info, deadline, self.max_answer_tokens)
            timings["prepare_ms"] = ms()
            from bot.explain.llm import ChatResult

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
            yield fallback(t("note.unavailable", lang, reason=exc))
            return
        except Exception:  # a bug here must not cost the user the KB answer
            log.exception("explanation failed")
            yield fallback(t("note.internal", lang))
            return
        finally:
            if not settled:
                self.breaker.release()
        self.breaker.success()  # the server answered; what it said is judged below

        validate_started = time.monotonic()
        try:
            if result.finish_reason == "length":
                raise AnswerRejected(f"the LLM's answer was cut off at {prompt.max_tokens} tokens")
            fields = parse_answer(result.text, prompt.allowed_ids, trusted_commands=_case_commands(draft), lang=lang)
            if lang == "zh" and not answer_in_language(fields, lang):
                raise AnswerRejected(t("note.wrong_language", lang))
        except AnswerRejected as exc:
            yield fallback(t("note.discarded", lang, reason=exc))
            return
        timings["validate_ms"] = (time.monotonic() - validate_started) * 1000
        timings["total_ms"] = ms()
        explanation = Explanation(
            **fields, language=lang, source="llm", note=None, model=info.model, timings=timings
        )
        self.cache.put(self._cache_key(draft, info), explanation)
        metrics.LLM_CALLS.labels(outcome="ok").inc()
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

    def _draft(
        self,
        diagnosis: Diagnosis,
        cases: Sequence[Case],
        host_facts: Mapping[str, Any] | Iterable[str] | None,
        lang: Language,
    ) -> Draft:
        """Everything the prompt may hold, redacted and clipped; no network (see build_draft)."""
        return build_draft(diagnosis, cases, host_facts, lang)

    def _cache_key(self, draft: Draft, info: ServerInfo) -> tuple[str, str]:
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
