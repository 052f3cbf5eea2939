"""The prompt: evidence, cases and host facts rendered through bot/explain/prompts/*.j2, then fitted to the
model's context.

Context budget: the prompt is rendered with all evidence, measured with vLLM's /tokenize (exact, chat
template included; a conservative estimate for servers without it) and trimmed until prompt plus answer
fit the served max_model_len. A prompt that cannot fit is never sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from bot.diagnosis.fix_values import fitted_case
from bot.diagnosis.redact import redact
from bot.errors import LLMUnavailable
from bot.explain.answer import AnswerLimits, answer_schema
from bot.models import Diagnosis, Language, LogLine

if TYPE_CHECKING:
    from bot.explain.llm import LLMClient, ServerInfo
    from kb.schema import Case

LANGUAGE_NAMES = {"en": "English", "zh": "Simplified Chinese (简体中文)"}

# Limits on what goes into the prompt.
MAX_EVIDENCE_LINES = 80
MAX_LINE_CHARS = 400
MAX_HOST_FACTS = 30
MAX_FACT_CHARS = 300
MIN_ANSWER_TOKENS = 192  # below this an answer is not worth asking for

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


# --- templates --------------------------------------------------------------------------------------
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
    undefined=jinja2.StrictUndefined,
    autoescape=False,  # plain-text prompts, not HTML  # noqa: S701
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
# Untrusted text (log lines, host output) goes inside ``` fences; a ``` in it would close the fence and let
# the rest read as prompt, so it is written with typographic quotes instead.
_env.filters["in_fence"] = lambda text: str(text).replace("```", "ʼʼʼ")
_env.filters["first_sentence"] = lambda text: re.split(
    r"(?<=[.!?。])\s", " ".join(str(text).split()), maxsplit=1
)[0]


@dataclass(frozen=True)
class CaseItem:
    case: Any
    score: float | None
    signature_hit: bool
    brief: bool = False  # title and first sentence of the cause only (to save context)


@dataclass
class Draft:
    diagnosis: Diagnosis
    items: list[CaseItem]
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
    kept: list[LogLine] = []
    used = 0
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


ROOT_PROMPT_CHARS = 400  # the root line in the prompt (a 10 KB line is cut; the evidence keeps its tail)


def estimate_tokens(messages: list[dict[str, str]]) -> int:
    """Conservative token estimate for servers without /tokenize: 1 token per CJK character, one per
    2.5 other characters, plus chat-template overhead."""
    total = 0
    for m in messages:
        text = m["content"]
        cjk = len(re.findall(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]", text))
        total += cjk + math.ceil((len(text) - cjk) / 2.5) + 8
    return total + 8


# --- building and fitting ---------------------------------------------------------------------------
def render_messages(
    draft: Draft,
    items: Sequence[CaseItem],
    evidence: Sequence[LogLine],
    facts: Sequence[str],
    *,
    trimmed: bool,
) -> list[dict[str, str]]:
    language_name = LANGUAGE_NAMES[draft.lang]
    system = _env.get_template("explain_system.j2").render(
        language_name=language_name, allowed_ids=draft.allowed_ids
    )
    root = getattr(draft.diagnosis, "root", None)
    triage_steps: list[str] = []
    if root is not None and draft.diagnosis.verdict != "match":  # no case established: the component's steps
        from bot.diagnosis.fix_values import fill
        from bot.diagnosis.root import triage

        steps = triage(root.component).steps
        values = getattr(draft.diagnosis, "fix_values", None)
        triage_steps = [f"{s.text_zh if draft.lang == 'zh' else s.text}"
                        + (f" `{fill(s.command, values)}`" if s.command else "") for s in steps]
    user = _env.get_template("explain_user.j2").render(
        root=root,
        root_text=(root.text[:ROOT_PROMPT_CHARS] + " …") if root is not None and len(root.text) > ROOT_PROMPT_CHARS
        else (root.text if root is not None else ""),
        triage_steps=triage_steps,
        verdict=draft.diagnosis.verdict,
        best_id=items[0].case.id if items else None,
        evidence=evidence,
        total_lines=draft.diagnosis.distilled.total_lines,
        trimmed=trimmed,
        cases=items,
        host_facts=facts,
        language_name=language_name,
        lang=draft.lang,
    )
    return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


def build_draft(
    diagnosis: Diagnosis,
    cases: Sequence[Case],
    host_facts: Mapping[str, Any] | Iterable[str] | None,
    lang: Language,
) -> Draft:
    """Everything the prompt may hold, redacted and clipped; no network."""
    cases = [fitted_case(c, diagnosis.fix_values) for c in cases]  # commands filled from the log (the LLM cites them)
    scores = {m.case_id: m for m in diagnosis.matches}
    items = [
        CaseItem(
            c,
            scores[c.id].score if c.id in scores else None,
            bool(c.id in scores and scores[c.id].signature_hit),
        )
        for c in cases
    ]
    lines = [_clip_line(ln) for ln in diagnosis.distilled.evidence]
    ordered = _evidence_by_priority(lines)[:MAX_EVIDENCE_LINES]
    allowed = tuple([c.id for c in cases] + ["none"])
    draft = Draft(diagnosis, items, ordered, _host_fact_lines(host_facts), lang, allowed, [])
    evidence = sorted(ordered, key=lambda ln: ln.line_no)
    draft.messages = render_messages(draft, items, evidence, draft.facts, trimmed=len(evidence) < len(lines))
    return draft


def fit_prompt(
    draft: Draft, client: LLMClient, info: ServerInfo, deadline: float, max_answer_tokens: int
) -> Prompt:
    """Shrink the draft until prompt + answer fit max_model_len, measuring with /tokenize.

    Order of sacrifice: log lines (least important first), then the detail of the runner-up cases,
    then the runner-up cases, then host facts. If even the best case alone leaves less than the
    wanted answer length, the answer gets what is left (at least MIN_ANSWER_TOKENS); otherwise the
    request is not sent at all."""
    ctx = info.max_model_len
    wanted = min(max_answer_tokens, ctx // 2)

    def measure(messages: list[dict[str, str]]) -> tuple[int, bool]:
        estimate = estimate_tokens(messages)
        if 2 * estimate + wanted <= ctx:
            return estimate, False  # fits even if the estimate is off by 2x: skip the round trip
        exact = client.count_tokens(messages, info.model, deadline)
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
        bare = render_messages(draft, items, [], facts, trimmed=True)
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
            candidate = render_messages(draft, items, chosen, facts, trimmed=True)
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
