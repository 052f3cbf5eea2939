"""Replies to a paste (golden-tested): the placeholder, the answer with its buttons, short notices.

Every dynamic string goes through bot.slack.reply.mrkdwn (escape + limits) right here, where it enters a
text object; nothing upstream pre-escapes. Slack's limits and the small blocks: bot/slack/reply/kit.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.models import Diagnosis, Match
from bot.slack.reply.kit import (
    FALLBACK_TEXT_MAX,
    SECTION_TEXT_MAX,
    Message,
)
from bot.slack.reply.kit import bounded_join as _bounded_join
from bot.slack.reply.kit import button as _button
from bot.slack.reply.kit import context as _context
from bot.slack.reply.kit import section as _section
from bot.slack.reply.mrkdwn import (
    code_block,
    escape,
    escape_limited,
    inline_code,
    plain_limited,
    user_mention,
)

# action_id → meaning; listeners register exactly these.
ACTION_FIXED = "feedback_fixed"
ACTION_NOT_HELPFUL = "feedback_not_helpful"
ACTION_RUN_DIAGNOSTICS = "run_host_diagnostics"
ACTION_ADD_KB_CASE = "add_kb_case"

_VERDICT_HEAD = {
    "match": ":white_check_mark: *Likely cause: {title}*",
    "uncertain": ":grey_question: *Possible cause (not certain): {title}*",
    "unknown": ":mag: *No confident match in the knowledge base*",
}


def _percent(score: float) -> str:
    return f"{round(max(0.0, min(1.0, score)) * 100)}%"


def _title(match: Match, language: str) -> str:
    if language == "zh" and match.title_zh:
        return f"{match.title_zh} ({match.title})"
    return match.title


def _steps(items: Sequence[Any]) -> list[tuple[str, str | None]]:
    """Fix steps from a KB case (FixStep) or an explanation (objects or plain strings)."""
    steps: list[tuple[str, str | None]] = []
    for item in items:
        if isinstance(item, str):
            steps.append((item, None))
        else:
            steps.append((str(getattr(item, "text", item)), getattr(item, "command", None)))
    return steps


def evidence_text(diagnosis: Diagnosis) -> str:
    """Evidence lines with their line numbers: the code block content and the KB-case draft."""
    lines = diagnosis.distilled.evidence or diagnosis.distilled.root_errors
    return "\n".join(f"{line.line_no:>5}  {line.text}" for line in lines)


# --- the answer ------------------------------------------------------------------------------------


def placeholder(what: str = "Reading your log and searching the knowledge base…") -> Message:
    text = f":stethoscope: {escape(what)}"
    return Message(text=text, blocks=[_section(text, "placeholder")])


def answer(
    diagnosis: Diagnosis,
    *,
    answer_id: str,
    case: Any | None = None,
    explanation: Any | None = None,
    streaming_text: str | None = None,
    llm_pending: bool = False,
    asker: str | None = None,
    outcome: str | None = None,
    host_facts_note: str | None = None,
) -> Message:
    """The threaded answer. `case` is the kb Case of the best match (fix steps, cause); `explanation`
    the final Explanation (LLM or KB); `streaming_text` the LLM text so far while it is being written;
    `host_facts_note` (host_facts_note()) is shown while and when the LLM explains with host facts."""
    language = diagnosis.distilled.language
    best = diagnosis.best
    blocks: list[dict[str, Any]] = []
    cut = False

    # 1. verdict
    if diagnosis.verdict == "unknown" or best is None:
        head = _VERDICT_HEAD["unknown"]
        fallback = "No confident match in the knowledge base."
    else:
        title, _ = escape_limited(_title(best, language), 300)
        head = _VERDICT_HEAD[diagnosis.verdict].format(title=title)
        fallback = f"{'Likely' if diagnosis.verdict == 'match' else 'Possible'} cause: {_title(best, language)}"
        head += f"\nKB case {inline_code(best.case_id, 120)} · {escape(best.area)} · confidence {_percent(best.score)}"
    if asker:
        head = f"{user_mention(asker)} {head}"
    blocks.append(_section(head, "verdict"))

    # 2. evidence
    distilled = diagnosis.distilled
    lines_note = f"{len(distilled.evidence)} of {distilled.total_lines} lines"
    code, evidence_cut = code_block(evidence_text(diagnosis) or "(no error lines found)", SECTION_TEXT_MAX - 60)
    cut |= evidence_cut
    blocks.append(_section(f"*Evidence* ({lines_note})\n{code}", "evidence"))

    # 3. why / explanation
    if diagnosis.verdict == "unknown" or best is None:
        nearest = [m for m in diagnosis.matches[:3]]
        if nearest:
            items = [
                f"• {escape_limited(_title(m, language), 200)[0]} ({inline_code(m.case_id, 120)}, {_percent(m.score)})"
                for m in nearest
            ]
            body, _ = _bounded_join(["*Nearest known cases* (none close enough to trust):", *items], SECTION_TEXT_MAX, "…")
            blocks.append(_section(body, "nearest"))
        blocks.append(
            _section(
                "Nothing in the knowledge base explains this log yet. If you find the fix, use "
                "*Add as a KB case* so the next person gets an answer straight away.",
                "invite",
            )
        )
    else:
        why_text, why_cut = _why_text(case, explanation, streaming_text, llm_pending)
        cut |= why_cut
        if why_text:
            blocks.append(_section(why_text, "why"))
        steps = _steps(getattr(explanation, "fix_steps", None) or getattr(case, "fix", None) or [])
        if steps:
            fix_text, fix_cut = _fix_text(steps)
            cut |= fix_cut
            blocks.append(_section(fix_text, "fix"))
        others = [m for m in diagnosis.matches[1:4]]
        if others:
            also = " · ".join(f"{escape_limited(_title(m, language), 120)[0]} ({_percent(m.score)})" for m in others)
            blocks.append(_context([f"Also possible: {also}"], "others"))

    # 4. provenance
    provenance = _provenance(diagnosis, explanation, streaming_text, llm_pending)
    llm_at_work = getattr(explanation, "source", None) == "llm" or streaming_text or llm_pending
    if host_facts_note and llm_at_work:
        provenance.insert(1, host_facts_note)
    if outcome and diagnosis.verdict != "unknown":
        provenance.insert(1, f":busts_in_silhouette: Team feedback on this case: {escape_limited(outcome, 100)[0]}")
    blocks.append(_context(provenance, "source"))

    # 5. buttons: every answer has them; each one answers when pressed (see listeners in actions/)
    blocks.append(answer_actions(answer_id))

    return Message(text=plain_limited(escape(fallback), FALLBACK_TEXT_MAX), blocks=blocks, cut=cut)


def _why_text(case: Any, explanation: Any, streaming_text: str | None, llm_pending: bool) -> tuple[str, bool]:
    budget = SECTION_TEXT_MAX - 40
    if explanation is not None:
        parts = [p for p in (getattr(explanation, "summary", ""), getattr(explanation, "why", "")) if p]
        body, was_cut = escape_limited("\n\n".join(parts), budget)
        return (f"*Why*\n{body}" if body else ""), was_cut
    if streaming_text:
        body, was_cut = escape_limited(streaming_text.strip(), budget - 30)
        return f"*Why* _(writing…)_\n{body}", was_cut
    cause = getattr(case, "cause", "")
    if cause:
        body, was_cut = escape_limited(cause.strip(), budget)
        suffix = "\n_Writing a tailored explanation…_" if llm_pending else ""
        return f"*Why*\n{body}{suffix}", was_cut
    return ("_Writing a tailored explanation…_" if llm_pending else ""), False


def _fix_text(steps: list[tuple[str, str | None]]) -> tuple[str, bool]:
    parts = []
    for i, (text, command) in enumerate(steps, 1):
        step = f"{i}. {escape_limited(text, 600)[0]}"
        if command:
            step += "\n" + code_block(command, 700)[0]
        parts.append(step)
    return _bounded_join(["*Fix*", *parts], SECTION_TEXT_MAX, "_More steps in the KB case._")


def _provenance(diagnosis: Diagnosis, explanation: Any, streaming_text: str | None, llm_pending: bool) -> list[str]:
    items: list[str] = []
    source = getattr(explanation, "source", None)
    if source == "llm":
        items.append(":robot_face: Explained by the team's LLM from the KB case; check commands before running them")
        best = diagnosis.best
        chosen = str(getattr(explanation, "case_id", "") or "")
        if chosen == "none":
            items.append("The LLM found none of the retrieved cases convincing")
        elif best is not None and chosen and chosen != best.case_id:
            items.append(f"The LLM thinks KB case {inline_code(chosen, 120)} fits better")
    elif streaming_text or llm_pending:
        items.append(":hourglass_flowing_sand: The LLM is writing an explanation…")
    else:
        items.append(":books: From the knowledge base")
    note = getattr(explanation, "note", None)
    if note:
        items.append(escape_limited(str(note), 300)[0])
    for note in diagnosis.distilled.notes[:3]:
        items.append(escape_limited(note, 200)[0])
    items.append(f"searched in {diagnosis.elapsed_ms:.0f} ms")
    return items


def host_facts_note(label: str, when: float) -> str:
    """"Using host facts from the diagnosis of gpu-01 at 14:05" (Slack shows the time in the reader's
    time zone; the fallback is UTC)."""
    fallback = time.strftime("%H:%M UTC", time.gmtime(when))
    return (f":desktop_computer: Using host facts from the diagnosis of {escape_limited(label, 120)[0]} "
            f"at <!date^{int(when)}^{{time}}|{fallback}>")


def answer_actions(answer_id: str) -> dict[str, Any]:
    buttons = [
        _button(":white_check_mark: Fixed it", ACTION_FIXED, answer_id, "primary"),
        _button(":x: Didn't help", ACTION_NOT_HELPFUL, answer_id),
        _button(":desktop_computer: Run diagnostics on a host", ACTION_RUN_DIAGNOSTICS, answer_id),
        _button(":heavy_plus_sign: Add as a KB case", ACTION_ADD_KB_CASE, answer_id),
    ]
    return {"type": "actions", "block_id": "answer_actions", "elements": buttons}


# --- short messages ----------------------------------------------------------------------------------


def notice(text: str, emoji: str = ":information_source:") -> Message:
    """A one-section message around an untrusted or user-facing string (escaped)."""
    body, _ = escape_limited(text, SECTION_TEXT_MAX - len(emoji) - 1)
    mrkdwn = f"{emoji} {body}"
    return Message(text=plain_limited(escape(text), FALLBACK_TEXT_MAX), blocks=[_section(mrkdwn)])


def input_error(message: str) -> Message:
    """Bad input (empty, too large, binary): the pipeline's or our own user-facing message."""
    return notice(message, ":warning:")


def internal_error(ref: str) -> Message:
    return notice(
        f"Sorry, something went wrong on my side while diagnosing this (ref {ref}). "
        "The log was not lost: try again, and tell the bot's admins the ref if it keeps happening.",
        ":rotating_light:",
    )
