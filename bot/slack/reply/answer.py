"""Block Kit builders: pure functions from pipeline values to Slack message payloads (golden-tested).

Every dynamic string goes through bot.slack.reply.mrkdwn (escape + limits) right here, where it enters a text
object; nothing upstream pre-escapes. Limits enforced: 3,000 chars per section text, 150 per header,
75 per button label, 10 context elements, 50 blocks per message (100 in views), a short plain `text`
fallback (Slack truncates above 40,000).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.facts import fact_lines
from bot.i18n import Language, as_language, case_cause, step_text, t
from bot.models import Diagnosis, Match
from bot.slack.recent import AnswerRecord
from bot.slack.reply.mrkdwn import (
    channel_link,
    code_block,
    escape,
    escape_limited,
    inline_code,
    plain_limited,
    user_mention,
)

SECTION_TEXT_MAX = 3000
HEADER_TEXT_MAX = 150
BUTTON_TEXT_MAX = 75
CONTEXT_ELEMENTS_MAX = 10
MESSAGE_BLOCKS_MAX = 50
VIEW_BLOCKS_MAX = 100
MESSAGE_TEXT_MAX = 40_000
FALLBACK_TEXT_MAX = 3000  # our own cap: notifications show a line or two anyway

# action_id → meaning; listeners register exactly these.
ACTION_FIXED = "feedback_fixed"
ACTION_NOT_HELPFUL = "feedback_not_helpful"
ACTION_RUN_DIAGNOSTICS = "run_host_diagnostics"
ACTION_ADD_KB_CASE = "add_kb_case"
ACTION_DRAFT_ISSUE = "draft_vllm_issue"
HOST_PICKER_CALLBACK = "host_picker"
HOST_PICKER_BLOCK = "target"
HOST_PICKER_INPUT = "target_input"

_VERDICT_EMOJI_HEAD = {"match": ":white_check_mark:", "uncertain": ":grey_question:", "unknown": ":mag:"}


@dataclass(frozen=True)
class Message:
    """A chat message payload: plain `text` fallback plus blocks. `cut` says some material was shortened
    and belongs in a file in the thread."""

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    cut: bool = False

    def as_kwargs(self) -> dict[str, Any]:
        return {"text": self.text, "blocks": self.blocks}


# --- small block helpers ---------------------------------------------------------------------------


def _section(mrkdwn: str, block_id: str | None = None) -> dict[str, Any]:
    assert len(mrkdwn) <= SECTION_TEXT_MAX, "callers bound section text"
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(items: Iterable[str], block_id: str | None = None) -> dict[str, Any]:
    elements = [{"type": "mrkdwn", "text": t} for t in items if t][:CONTEXT_ELEMENTS_MAX]
    block: dict[str, Any] = {"type": "context", "elements": elements}
    if block_id:
        block["block_id"] = block_id
    return block


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": plain_limited(text, HEADER_TEXT_MAX)}}


def _button(label: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": plain_limited(label, BUTTON_TEXT_MAX), "emoji": True},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _percent(score: float) -> str:
    return f"{round(max(0.0, min(1.0, score)) * 100)}%"


def _title(match: Match, language: str) -> str:
    if language == "zh" and match.title_zh:
        return f"{match.title_zh} ({match.title})"  # the English title is what issue trackers use
    return match.title


def _steps(items: Sequence[Any], lang: Language = "en") -> list[tuple[str, str | None]]:
    """Fix steps from a KB case (FixStep, in `lang` when written) or an explanation (objects or strings)."""
    steps: list[tuple[str, str | None]] = []
    for item in items:
        if isinstance(item, str):
            steps.append((item, None))
        elif hasattr(item, "text_zh"):
            steps.append((step_text(item, lang), getattr(item, "command", None)))
        else:
            steps.append((str(getattr(item, "text", item)), getattr(item, "command", None)))
    return steps


def _bounded_join(parts: Iterable[str], limit: int, more: str) -> tuple[str, bool]:
    """Join already-escaped parts with newlines until `limit`; append `more` when something is left out."""
    out: list[str] = []
    used = 0
    for part in parts:
        extra = len(part) + (1 if out else 0)
        if used + extra > limit - len(more) - 1:
            out.append(more)
            return "\n".join(out), True
        out.append(part)
        used += extra
    return "\n".join(out), False


def evidence_text(diagnosis: Diagnosis) -> str:
    """Evidence lines with their line numbers: the code block content and the KB-case draft."""
    lines = diagnosis.distilled.evidence or diagnosis.distilled.root_errors
    return "\n".join(f"{line.line_no:>5}  {line.text}" for line in lines)


# --- the answer ------------------------------------------------------------------------------------


def placeholder(what: str | None = None, lang: Language = "en") -> Message:
    text = f":stethoscope: {escape(what or t('slack.placeholder', lang))}"
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
    language: str | None = None,
) -> Message:
    """The threaded answer, in `language` (default: the language of the paste or question). `case` is the kb Case of the best match (fix steps, cause); `explanation`
    the final Explanation (LLM or KB); `streaming_text` the LLM text so far while it is being written;
    `host_facts_note` (host_facts_note()) is shown while and when the LLM explains with host facts."""
    lang: Language = as_language(language) or as_language(diagnosis.distilled.language) or "en"
    language = lang
    question = getattr(diagnosis, "kind", "log") == "question"
    best = diagnosis.best
    blocks: list[dict[str, Any]] = []
    cut = False

    # 1. verdict
    if diagnosis.verdict == "unknown" or best is None:
        key = "slack.head.question.unknown" if question else "slack.head.unknown"
        head = f"{_VERDICT_EMOJI_HEAD['unknown']} *{t(key, lang)}*"
        fallback = t(key, lang)
    else:
        title, _ = escape_limited(_title(best, language), 300)
        key = "slack.head.question.uncertain" if question and diagnosis.verdict == "uncertain" else (
            f"slack.head.{diagnosis.verdict}")
        head = f"{_VERDICT_EMOJI_HEAD[diagnosis.verdict]} *{t(key, lang, title=title)}*"
        fallback = t(key, lang, title=_title(best, language))
        case_line = t("slack.case_line", lang, case=inline_code(best.case_id, 120), area=escape(best.area),
                      pct=_percent(best.score))
        head += f"\n{case_line}"
    for note in diagnosis.notes[:2]:  # e.g. the paste ends inside a traceback
        head += f"\n:warning: {escape_limited(note, 300)[0]}"
    if asker:
        head = f"{user_mention(asker)} {head}"
    blocks.append(_section(head, "verdict"))

    # 2. evidence
    distilled = diagnosis.distilled
    if question:  # the question itself, and which of its terms led to the case
        asked, _ = escape_limited(distilled.evidence[0].text if distilled.evidence else "", 500)
        why = escape_limited(best.evidence[0].why, 400)[0] if best is not None and best.evidence else ""
        body = f"*{t('slack.question', lang)}*\n> {asked}" + (f"\n_{why}_" if why else "")
        blocks.append(_section(body, "evidence"))
    else:
        lines_note = t("slack.lines", lang, kept=len(distilled.evidence), total=distilled.total_lines)
        code, evidence_cut = code_block(
            evidence_text(diagnosis) or t("slack.no_error_lines", lang), SECTION_TEXT_MAX - 60
        )
        cut |= evidence_cut
        blocks.append(_section(f"*{t('slack.evidence', lang)}* ({lines_note})\n{code}", "evidence"))

    # 3. why / explanation
    if diagnosis.verdict == "unknown" or best is None:
        nearest = [m for m in diagnosis.matches[:3]]
        if nearest:
            items = [
                f"• {escape_limited(_title(m, language), 200)[0]} ({inline_code(m.case_id, 120)}, {_percent(m.score)})"
                for m in nearest
            ]
            body, _ = _bounded_join([f"*{t('slack.nearest', lang)}*{t('slack.nearest_tail', lang)}", *items], SECTION_TEXT_MAX, "…")
            blocks.append(_section(body, "nearest"))
        blocks.append(_section(t("slack.invite", lang), "invite"))
    else:
        why_text, why_cut = _why_text(case, explanation, streaming_text, llm_pending, lang)
        cut |= why_cut
        if why_text:
            blocks.append(_section(why_text, "why"))
        steps = _steps(getattr(explanation, "fix_steps", None) or getattr(case, "fix", None) or [], lang)
        if steps:
            fix_text, fix_cut = _fix_text(steps, lang)
            cut |= fix_cut
            blocks.append(_section(fix_text, "fix"))
        notes = [escape_limited(n, 300)[0] for n in best.notes]
        if notes:
            blocks.append(_context([f":pushpin: {n}" for n in notes[:3]], "case_notes"))
        others = [m for m in diagnosis.matches[1:4]]
        if others:
            also = " · ".join(f"{escape_limited(_title(m, language), 120)[0]} ({_percent(m.score)})" for m in others)
            label = t("slack.candidates" if question and diagnosis.verdict == "uncertain" else "slack.also", lang)
            blocks.append(_context([f"{label}: {also}"], "others"))
    if diagnosis.also_noticed:
        noticed = " · ".join(
            f"{escape_limited(_title(m, language), 120)[0]} ({inline_code(m.case_id, 80)})" for m in diagnosis.also_noticed
        )
        blocks.append(_context([f"{t('slack.also_noticed', lang)}: {noticed}"], "noticed"))
    setup = fact_lines(diagnosis.facts)
    if setup:
        body, setup_cut = _bounded_join(
            [f"*{t('slack.setup', lang)}*", *(f"• {escape_limited(f, 200)[0]}" for f in setup)],
            SECTION_TEXT_MAX, "…",
        )
        cut |= setup_cut
        blocks.append(_section(body, "setup"))

    # 4. provenance
    provenance = _provenance(diagnosis, explanation, streaming_text, llm_pending, lang)
    llm_at_work = getattr(explanation, "source", None) == "llm" or streaming_text or llm_pending
    if host_facts_note and llm_at_work:
        provenance.insert(1, host_facts_note)
    if outcome and diagnosis.verdict != "unknown":
        feedback = t("slack.feedback", lang, outcome=escape_limited(outcome, 100)[0])
        provenance.insert(1, f":busts_in_silhouette: {feedback}")
    blocks.append(_context(provenance, "source"))

    # 5. buttons: every answer has them; each one answers when pressed (see listeners in actions/)
    blocks.append(answer_actions(answer_id, lang))

    return Message(text=plain_limited(escape(fallback), FALLBACK_TEXT_MAX), blocks=blocks, cut=cut)


def _why_text(
    case: Any, explanation: Any, streaming_text: str | None, llm_pending: bool, lang: Language = "en"
) -> tuple[str, bool]:
    budget = SECTION_TEXT_MAX - 40
    why = t("slack.why", lang)
    if explanation is not None:
        parts = [p for p in (getattr(explanation, "summary", ""), getattr(explanation, "why", "")) if p]
        body, was_cut = escape_limited("\n\n".join(parts), budget)
        return (f"*{why}*\n{body}" if body else ""), was_cut
    if streaming_text:
        body, was_cut = escape_limited(streaming_text.strip(), budget - 30)
        return f"*{why}* _({t('slack.writing', lang)})_\n{body}", was_cut
    cause = case_cause(case, lang) if hasattr(case, "cause_zh") else getattr(case, "cause", "")
    if cause:
        body, was_cut = escape_limited(cause.strip(), budget)
        suffix = f"\n_{t('slack.writing_long', lang)}_" if llm_pending else ""
        return f"*{why}*\n{body}{suffix}", was_cut
    return (f"_{t('slack.writing_long', lang)}_" if llm_pending else ""), False


def _fix_text(steps: list[tuple[str, str | None]], lang: Language = "en") -> tuple[str, bool]:
    parts = []
    for i, (text, command) in enumerate(steps, 1):
        step = f"{i}. {escape_limited(text, 600)[0]}"
        if command:
            step += "\n" + code_block(command, 700)[0]
        parts.append(step)
    return _bounded_join([f"*{t('slack.fix', lang)}*", *parts], SECTION_TEXT_MAX, f"_{t('slack.more_steps', lang)}_")


def _provenance(
    diagnosis: Diagnosis, explanation: Any, streaming_text: str | None, llm_pending: bool, lang: Language = "en"
) -> list[str]:
    items: list[str] = []
    source = getattr(explanation, "source", None)
    if source == "llm":
        items.append(f":robot_face: {t('slack.by_llm', lang)}")
        best = diagnosis.best
        chosen = str(getattr(explanation, "case_id", "") or "")
        if chosen == "none":
            items.append(t("slack.llm_none", lang))
        elif best is not None and chosen and chosen != best.case_id:
            items.append(t("slack.llm_other", lang, case=inline_code(chosen, 120)))
    elif streaming_text or llm_pending:
        items.append(f":hourglass_flowing_sand: {t('slack.llm_writing', lang)}")
    else:
        items.append(f":books: {t('slack.from_kb', lang)}")
    note = getattr(explanation, "note", None)
    if note:
        items.append(escape_limited(str(note), 300)[0])
    for note in diagnosis.distilled.notes[:3]:
        items.append(escape_limited(note, 200)[0])
    items.append(t("slack.searched", lang, ms=diagnosis.elapsed_ms))
    return items


def host_facts_note(label: str, when: float) -> str:
    """"Using host facts from the diagnosis of gpu-01 at 14:05" (Slack shows the time in the reader's
    time zone; the fallback is UTC)."""
    fallback = time.strftime("%H:%M UTC", time.gmtime(when))
    return (f":desktop_computer: Using host facts from the diagnosis of {escape_limited(label, 120)[0]} "
            f"at <!date^{int(when)}^{{time}}|{fallback}>")


def answer_actions(answer_id: str, lang: Language = "en") -> dict[str, Any]:
    buttons = [
        _button(f":white_check_mark: {t('button.fixed', lang)}", ACTION_FIXED, answer_id, "primary"),
        _button(f":x: {t('button.not_helpful', lang)}", ACTION_NOT_HELPFUL, answer_id),
        _button(f":desktop_computer: {t('button.run_diagnostics', lang)}", ACTION_RUN_DIAGNOSTICS, answer_id),
        _button(f":heavy_plus_sign: {t('button.add_case', lang)}", ACTION_ADD_KB_CASE, answer_id),
        _button(f":memo: {t('button.draft_issue', lang)}", ACTION_DRAFT_ISSUE, answer_id),
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


HELP_TEXT = """*vLLM Doctor* reads vLLM error logs and tells you the likely cause and the fix, from the team's knowledge base (and the team's LLM when configured).

*Ask about a log*
• Paste a log in a DM to me, or mention me with it: `@vLLM Doctor <log>` (works in threads too)
• Mention me with nothing else in the thread of a pasted log to diagnose that log
• `/vllm-explain <log>` in any channel I am in
• Upload the log as a file or snippet in a DM or with a mention (text files up to {max_mb} MB)
• On any message: *⋮ More actions → Diagnose this message*
{watch}
*Check a GPU host*
• `/vllm-diagnose <host or group> [check …]` or `/vllm-diagnose <host> tier <N>`
• `@vLLM Doctor diagnose <host>` inside a thread
{runner}
*On every answer*
• *Fixed it* / *Didn't help* tell the team whether the KB case worked
• *Run diagnostics on a host* and *Add as a KB case*
"""


def help_message(*, max_bytes: int, watch_channels: Sequence[str], runner_enabled: bool) -> Message:
    watch = ""
    if watch_channels:
        links = ", ".join(channel_link(c) for c in watch_channels[:10])
        watch = f"• I also answer error logs posted in {links}\n"
    runner = "" if runner_enabled else "_Host diagnostics are not configured on this bot yet._\n"
    text = HELP_TEXT.format(max_mb=max(1, max_bytes // (1024 * 1024)), watch=watch, runner=runner)
    return Message(text="How to use vLLM Doctor", blocks=[_section(text.strip(), "help")])


def home_view(
    *,
    user_id: str,
    kb_size: int,
    recent: Sequence[AnswerRecord],
    llm_enabled: bool,
    runner_enabled: bool,
    max_bytes: int,
    watch_channels: Sequence[str],
    now: float | None = None,
    lang: Language = "en",
) -> dict[str, Any]:
    """The App Home tab: usage, KB size, the viewer's recent diagnoses (in the viewer's language)."""
    now = time.time() if now is None else now
    blocks: list[dict[str, Any]] = [_header("vLLM Doctor")]
    stats = [
        f":books: {t('slack.home.cases', lang, n=kb_size)}",
        f":robot_face: {t('slack.home.llm_on' if llm_enabled else 'slack.home.llm_off', lang)}",
        f":desktop_computer: {t('slack.home.runner_on' if runner_enabled else 'slack.home.runner_off', lang)}",
    ]
    blocks.append(_context(stats, "stats"))
    blocks.extend(help_message(max_bytes=max_bytes, watch_channels=watch_channels, runner_enabled=runner_enabled).blocks)
    blocks.append(_context([escape(t("slack.home.ask", lang))], "ask"))
    blocks.append({"type": "divider"})
    blocks.append(_section(f"*{t('slack.home.recent', lang)}*", "recent_head"))
    if not recent:
        blocks.append(_context([t("slack.home.empty", lang)], "recent_empty"))
    for record in recent[:10]:
        if record.case_id:
            what = f"{escape_limited(record.title or record.case_id, 150)[0]} ({inline_code(record.case_id, 100)})"
        else:
            what = t("slack.home.no_match", lang)
        feedback = record.feedback.get(user_id)
        mark = {"fixed": " · :white_check_mark: fixed", "not_helpful": " · :x: didn't help"}.get(feedback or "", "")
        ago = _ago(now - record.created)
        blocks.append(_context([f"{ago} in {channel_link(record.channel_id)}: {escape(record.verdict)} · {what}{mark}"]))
    return {"type": "home", "blocks": blocks[:VIEW_BLOCKS_MAX]}


def _ago(seconds: float) -> str:
    if seconds < 90:
        return "just now"
    if seconds < 3600 * 1.5:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400 * 1.5:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"


def host_picker_view(*, private_metadata: str, hosts_hint: str = "", lang: Language = "en") -> dict[str, Any]:
    """Modal that asks which host or group to check."""
    hint = hosts_hint or t("slack.picker.hint", lang)
    return {
        "type": "modal",
        "callback_id": HOST_PICKER_CALLBACK,
        "private_metadata": private_metadata,
        "title": {"type": "plain_text", "text": t("slack.picker.title", lang)},
        "submit": {"type": "plain_text", "text": t("slack.picker.submit", lang)},
        "close": {"type": "plain_text", "text": t("slack.picker.cancel", lang)},
        "blocks": [
            {
                "type": "input",
                "block_id": HOST_PICKER_BLOCK,
                "label": {"type": "plain_text", "text": t("slack.picker.label", lang)},
                "hint": {"type": "plain_text", "text": plain_limited(hint, 2000)},
                "element": {
                    "type": "plain_text_input",
                    "action_id": HOST_PICKER_INPUT,
                    "max_length": 200,
                    "placeholder": {"type": "plain_text", "text": "gpu-01"},
                },
            }
        ],
    }


# --- host diagnostics ----------------------------------------------------------------------------------

_VERDICT_EMOJI = {
    "ok": ":white_check_mark:",
    "warn": ":warning:",
    "fail": ":x:",
    "error": ":exclamation:",
    "timeout": ":stopwatch:",
    "skipped": ":heavy_minus_sign:",
}
_HOST_FIELDS_PER_SECTION = 10


def host_progress(target: str, hosts: Sequence[str], latest: str | None, lang: Language = "en") -> Message:
    shown = ", ".join(hosts[:8]) + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")
    text = f":hourglass_flowing_sand: {t('slack.host.running', lang, target=escape_limited(target, 100)[0])}"
    if len(hosts) > 1:
        text += f" ({len(hosts)} hosts: {escape_limited(shown, 600)[0]})"
    blocks_: list[dict[str, Any]] = [_section(text, "host_progress")]
    if latest:
        blocks_.append(_context([escape_limited(latest, 300)[0]], "host_latest"))
    return Message(text=f"Running checks on {escape_limited(target, 100)[0]}…", blocks=blocks_)


def host_report(report: Any, *, kb_titles: dict[str, str], asker: str | None = None, lang: Language = "en",
                fleet_notes: Sequence[str] = ()) -> Message:
    """One host: its findings. Several hosts: drift from the baseline and hosts that differ from the rest
    first (`fleet_notes`, bot/runner/fleet_view.py), then a host × area grid, then the worst findings."""
    verdict = report.verdict
    hosts = report.hosts
    findings = report.findings()
    head = f"{_VERDICT_EMOJI.get(verdict, '')} *{escape_limited(report.target, 100)[0]}*: "
    problems = len(findings) + sum(1 for h in hosts if h.error)
    checks = sum(len(h.checks) for h in hosts)
    if lang == "zh":
        head += t("slack.host.none", lang) if problems == 0 else t("slack.host.problems", lang, n=problems)
        head += f"（{t('slack.host.counts', lang, hosts=len(hosts), checks=checks, secs=report.duration_s)}）"
    else:
        head += "no problems found" if problems == 0 else f"{problems} problem{'s' if problems != 1 else ''} found"
        head += f" ({len(hosts)} host{'s' if len(hosts) != 1 else ''}, {checks} checks, {report.duration_s:.1f} s)"
    if asker:
        head = f"{user_mention(asker)} {head}"
    out: list[dict[str, Any]] = [_section(head, "host_verdict")]
    cut = False
    if fleet_notes:  # "what changed / what differs" is usually the answer to "works on A, fails on B"
        body, notes_cut = _bounded_join([f":left_right_arrow: {escape_limited(n, 300)[0]}" for n in fleet_notes[:10]],
                                        SECTION_TEXT_MAX, "…")
        cut |= notes_cut or len(fleet_notes) > 10
        out.append(_section(body, "fleet_notes"))

    if len(hosts) > 1:
        fields = []
        for host in hosts:
            name = escape_limited(host.host, 80)[0]
            if host.error:
                body = f"{_VERDICT_EMOJI['error']} *{name}*\n{escape_limited(host.error, 300)[0]}"
            else:
                areas = " · ".join(f"{escape(a)} {_VERDICT_EMOJI.get(v, v)}" for a, v in sorted(host.by_area().items()))
                body = f"{_VERDICT_EMOJI.get(host.verdict, '')} *{name}*\n{areas or 'no checks ran'}"
            fields.append({"type": "mrkdwn", "text": plain_limited(body, 2000)})
        max_sections = 30  # leaves room for the findings and buttons within 50 blocks
        for i in range(0, len(fields), _HOST_FIELDS_PER_SECTION):
            if i // _HOST_FIELDS_PER_SECTION >= max_sections:
                cut = True
                out.append(_context([f"{len(fields) - i} more hosts in the file below"]))
                break
            out.append({"type": "section", "fields": fields[i : i + _HOST_FIELDS_PER_SECTION]})
    else:
        for host in hosts:
            if host.error:
                out.append(_section(f"{_VERDICT_EMOJI['error']} {t('slack.host.unreachable', lang)} "
                                    f"{escape_limited(host.error, 2500)[0]}", "host_error"))

    if findings:
        lines = []
        for host_name, result in findings:
            where = f"{escape_limited(host_name, 60)[0]} " if len(hosts) > 1 else ""
            line = (f"{_VERDICT_EMOJI.get(result.verdict, '')} {where}{inline_code(result.id, 80)} "
                    f"{escape_limited(result.message, 300)[0]}")
            lines.append(line)
        body, was_cut = _bounded_join(
            [f"*{t('slack.host.findings', lang)}*", *lines], SECTION_TEXT_MAX, f"_{t('slack.host.more', lang)}_"
        )
        cut |= was_cut
        out.append(_section(body, "findings"))
    if kb_titles:
        items = [f"• {escape_limited(title, 200)[0]} ({inline_code(case_id, 100)})" for case_id, title in kb_titles.items()]
        body, _ = _bounded_join([f"*{t('slack.host.cases', lang)}*", *items], SECTION_TEXT_MAX, "…")
        out.append(_section(body, "cases"))
    out.append(_context([t("slack.host.raw", lang)], "raw_note"))
    fallback = f"{report.target}: {'no problems found' if problems == 0 else f'{problems} problems found'}"
    return Message(text=plain_limited(escape(fallback), FALLBACK_TEXT_MAX), blocks=out[:MESSAGE_BLOCKS_MAX], cut=cut)
