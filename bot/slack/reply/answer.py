"""Block Kit builders: pure functions from pipeline values to Slack message payloads (golden-tested).

Every dynamic string goes through bot.slack.reply.mrkdwn (escape + limits) right here, where it enters a text
object; nothing upstream pre-escapes. Limits enforced: 3,000 chars per section text, 150 per header,
75 per button label, 10 context elements, 50 blocks per message (100 in views), a short plain `text`
fallback (Slack truncates above 40,000).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.diagnosis.fix_values import fill, note_lines, step_lines
from bot.diagnosis.root import established, read_root, search_phrase, triage
from bot.models import Component, Diagnosis, Match
from bot.present.i18n import Language, as_language, case_cause, note_text, step_text, t
from bot.present.render import answer_root, fact_text, shown_scores
from bot.slack.reply.kit import (
    ACTION_ADD_KB_CASE,
    ACTION_DRAFT_ISSUE,
    ACTION_FIXED,
    ACTION_NOT_HELPFUL,
    ACTION_RUN_DIAGNOSTICS,
    FALLBACK_TEXT_MAX,
    SECTION_TEXT_MAX,
    Message,
    _bounded_join,
    _button,
    _context,
    _section,
)
from bot.slack.reply.mrkdwn import (
    code_block,
    escape,
    escape_limited,
    inline_code,
    plain_limited,
    user_mention,
)

_VERDICT_EMOJI_HEAD = {"match": ":white_check_mark:", "uncertain": ":grey_question:", "unknown": ":mag:"}


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


def evidence_text(diagnosis: Diagnosis) -> str:
    """Evidence lines with their line numbers: the code block content and the KB-case draft."""
    lines = diagnosis.distilled.evidence or diagnosis.distilled.root_errors
    return "\n".join(f"{line.line_no:>5}  {line.text}" for line in lines)


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
    since: tuple[Sequence[Any], float] | None = None,
) -> Message:
    """The threaded answer, in `language` (default: the language of the paste or question). `case` is the kb Case of the best match (fix steps, cause); `explanation`
    the final Explanation (LLM or KB); `streaming_text` the LLM text so far while it is being written;
    `host_facts_note` (host_facts_note()) is shown while and when the LLM explains with host facts; `since`
    (changes, when) what differs from the channel's last healthy start-up of the same model (bot/diagnosis/since.py)."""
    lang: Language = as_language(language) or as_language(diagnosis.distilled.language) or "en"
    language = lang
    question = getattr(diagnosis, "kind", "log") == "question"
    best = diagnosis.best
    blocks: list[dict[str, Any]] = []
    cut = False

    # a pasted error line answered as a question still names its root (bot/root.pasted_line_root)
    root = diagnosis.root if question else answer_root(diagnosis)
    uncovered = ((not question or root is not None) and best is not None
                 and not established(diagnosis.verdict, diagnosis.matches, root))
    # 1. verdict
    if uncovered:
        head = f"{_VERDICT_EMOJI_HEAD['unknown']} *{t('slack.head.uncovered', lang)}*"
        fallback = t("slack.head.uncovered", lang)
    elif diagnosis.verdict == "unknown" or best is None:
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
        head += f"\n:warning: {escape_limited(note_text(note, lang), 300)[0]}"
    if asker:
        head = f"{user_mention(asker)} {head}"
    blocks.append(_section(head, "verdict"))
    if since is not None:  # what changed since this model last started fine here, before the diagnosis
        blocks.append(_section(_since_text(since[0], since[1], diagnosis, lang), "since"))
    if not question or root is not None:  # the line to fix leads (bot/diagnosis/root.py)
        blocks.append(_section(_root_text(diagnosis, root, lang), "root"))

    # 2. evidence
    distilled = diagnosis.distilled
    if question:  # the question itself, and which of its terms led to the case
        asked, _ = escape_limited(distilled.evidence[0].text if distilled.evidence else "", 500)
        # which words led to the case is matching vocabulary: the CLI shows it with -v, Slack not at all
        body = f"*{t('slack.question', lang)}*\n> {asked}"
        blocks.append(_section(body, "evidence"))
    else:
        lines_note = t("slack.lines", lang, kept=len(distilled.evidence), total=distilled.total_lines)
        code, evidence_cut = code_block(
            evidence_text(diagnosis) or t("slack.no_error_lines", lang), SECTION_TEXT_MAX - 60
        )
        cut |= evidence_cut
        blocks.append(_section(f"*{t('slack.evidence', lang)}* ({lines_note})\n{code}", "evidence"))

    # 3. why / explanation
    if uncovered or (not question and best is None):
        blocks.extend(_uncovered_blocks(diagnosis, root, answer_id, lang))
    elif diagnosis.verdict == "unknown" or best is None:
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
        steps = [(text, fill(command, getattr(diagnosis, "fix_values", None)) if command else None) for text, command in steps]
        if steps:
            fix_text, fix_cut = _fix_text(steps, lang)
            cut |= fix_cut
            blocks.append(_section(fix_text, "fix"))
            fitted = _fit_lines(case, diagnosis, lang, from_case=not getattr(explanation, "fix_steps", None))
            if fitted:
                blocks.append(_context(fitted, "fix_values"))
        notes = [escape_limited(note_text(n, lang), 300)[0] for n in best.notes]
        if notes:
            blocks.append(_context([f":pushpin: {n}" for n in notes[:3]], "case_notes"))
        others = [m for m in diagnosis.matches[1:4]]
        if others:
            scores = shown_scores(diagnosis.matches[:4])[1:]  # never above the one before: the order is the answer's
            also = " · ".join(f"{escape_limited(_title(m, language), 120)[0]} ({_percent(s)})"
                              for m, s in zip(others, scores, strict=True))
            label = t("slack.candidates" if question and diagnosis.verdict == "uncertain" else "slack.also", lang)
            blocks.append(_context([f"{label}: {also}"], "others"))
    if diagnosis.also_noticed:
        noticed = " · ".join(
            f"{escape_limited(_title(m, language), 120)[0]} ({inline_code(m.case_id, 80)})" for m in diagnosis.also_noticed
        )
        blocks.append(_context([f"{t('slack.also_noticed', lang)}: {noticed}"], "noticed"))
    setup = fact_text(diagnosis.facts, lang)
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


def _since_text(changes: Sequence[Any], when: float, diagnosis: Diagnosis, lang: Language) -> str:
    model = diagnosis.facts.model if diagnosis.facts is not None else None
    source = t("slack.since.source", lang, model=model or "?", day=time.strftime("%Y-%m-%d", time.gmtime(when)))
    out = [f":arrows_counterclockwise: *{escape(t('since.head', lang, source=source))}*"]
    if not changes:
        out.append(escape(t("since.none", lang)))
    for c in changes[:12]:
        where = f"L{c.before_line or '?'} → L{c.after_line or '?'}"
        out.append(f"• {escape(t('since.' + c.group, lang))}: {inline_code(c.name, 60)} "
                   f"{inline_code(c.before, 80)} → {inline_code(c.after, 80)}  _({where})_")
    return "\n".join(out)


def _root_text(diagnosis: Diagnosis, root: Any, lang: Language) -> str:
    """The root line and its component, or why no line states the error to fix."""
    if root is None:
        reading = read_root(diagnosis.distilled, diagnosis.facts, diagnosis.verdict, diagnosis.matches)
        key = f"root.missing.{reading.missing or 'no_error'}"
        return f":warning: {escape(t(key, lang))}"
    steps = triage(root.component)
    title = steps.title_zh if lang == "zh" else steps.title
    line, _ = code_block(root.text, 1200)
    component = t("root.component", lang, component=root.component, title=title)
    raised = root.raised_at
    if raised is not None:  # file and function come from the paste: escaped like any of its text
        component += "\n" + t("root.raised", lang, file=raised.file, line=raised.line, function=raised.function,
                              log_line=raised.log_line)
    return f":dart: *{t('slack.root', lang)}* — L{root.line}\n{line}\n{escape(component)}"


def _uncovered_blocks(diagnosis: Diagnosis, root: Any, answer_id: str, lang: Language) -> list[dict[str, Any]]:
    """No case established: candidates as possibly related (one line each), the component's triage steps,
    a search phrase, and a button that runs the component's host checks through the host picker."""
    blocks: list[dict[str, Any]] = []
    if diagnosis.matches:
        items = [f"• {escape_limited(_title(m, lang), 200)[0]} ({inline_code(m.case_id, 120)}, {_percent(s)})"
                 for m, s in zip(diagnosis.matches[:3], shown_scores(diagnosis.matches[:3]), strict=True)]
        body, _ = _bounded_join([f"*{escape(t('unknown.possibly', lang))}*", *items], SECTION_TEXT_MAX, "…")
        blocks.append(_section(body, "possibly_related"))
    component: Component = root.component if root is not None else "other"
    steps = triage(component)
    title = steps.title_zh if lang == "zh" else steps.title
    values = getattr(diagnosis, "fix_values", None)  # triage commands are filled from the log like a case's
    fix_text, _ = _fix_text([(s.text_zh if lang == "zh" else s.text, fill(s.command, values) if s.command else None)
                             for s in steps.steps], lang)
    head = f"*{escape(t('unknown.triage', lang, title=title))}*"
    body, _ = _bounded_join([head, fix_text.split("\n", 1)[1] if "\n" in fix_text else fix_text],
                            SECTION_TEXT_MAX, "…")
    blocks.append(_section(body, "triage"))
    extra = []
    if root is not None and (phrase := search_phrase(root.text)):
        extra.append(t("unknown.search", lang, phrase=inline_code(phrase, 200)))
    extra.append(t("slack.draft_pointer", lang))
    blocks.append(_context(extra, "uncovered_more"))
    if diagnosis.verdict == "unknown":
        blocks.append(_section(t("slack.invite", lang), "invite"))
    if steps.checks:
        label = f":desktop_computer: {t('slack.root_checks', lang, component=component)}"
        value = f"{answer_id} checks:{','.join(steps.checks)}"
        blocks.append({"type": "actions", "block_id": "root_checks",
                       "elements": [_button(label, ACTION_RUN_DIAGNOSTICS, value)]})
    return blocks


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


def _fit_lines(case: Any, diagnosis: Diagnosis, lang: Language, from_case: bool = True) -> list[str]:
    """How the commands' computed values were worked out from the log, and notes on them (bot/diagnosis/fix_values.py).
    from_case: the steps shown are the case's own (not the LLM's): then a <…> left unfilled is pointed out."""
    values = getattr(diagnosis, "fix_values", None)
    unfilled = t("fit.unfilled", lang)
    lines: list[str] = []
    for step in getattr(case, "fix", None) or []:
        for line in step_lines(getattr(step, "command", None), values, lang):
            if line != unfilled:
                lines.append(f":abacus: {line}")
            elif from_case:
                lines.append(f":pencil2: {line}")
    lines += [f":warning: {note}" for note in note_lines(values, lang)]
    return [escape_limited(line, 400)[0] for line in dict.fromkeys(lines)][:5]


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
