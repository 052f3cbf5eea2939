"""Block Kit for growing the KB from Slack: the case form, the duplicate choice, review requests and
decisions, the feedback thanks, the App Home section. Pure functions (no I/O); every untrusted string
(log lines, titles, causes, regexes typed by people) is escaped and bounded here via bot.slack.reply.mrkdwn.

Slack limits respected: modal title/submit/close ≤ 24 chars, plain_text_input ≤ 3,000 chars (initial
values are cut to fit), option text ≤ 75, option value ≤ 150, section text ≤ 3,000, 100 blocks a view.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bot.kb_growth.duplicates import Similar
from bot.kb_growth.form import SEVERITIES, CaseForm
from bot.present.i18n import Language, t
from bot.slack.reply.kit import Message
from bot.slack.reply.mrkdwn import (
    code_block,
    escape,
    escape_limited,
    inline_code,
    plain_limited,
    user_mention,
)
from kb.schema import AREAS

SHORTCUT_ADD_TO_KB = "add_to_kb"  # message shortcut "Add to vLLM KB" (slack-manifest.yaml)
VIEW_CASE_FORM = "kb_case_form"
VIEW_DUPLICATE = "kb_case_duplicate"
ACTION_REVIEW_APPROVE = "kb_review_approve"
ACTION_REVIEW_REJECT = "kb_review_reject"
ACTION_REVIEW_EDIT = "kb_review_edit"
ACTION_RETRAIN = "kb_retrain_ranker"  # App Home, reviewers only: vllm-doctor train --with-feedback  # a drafted case (team-learning loop): open it in the case form
CHOICE_BLOCK = "choice"
INPUT_ACTION = "value"  # action_id of every input element: state.values[block_id]["value"]
CHOICE_NEW = "new"
CHOICE_EXAMPLE_PREFIX = "example:"

MODAL_TITLE = t("kbform.modal_title", "en")
# Only a well-formed Slack message link goes into a <url|label> link (anything else could break out of it).
_PERMALINK_RE = re.compile(r"^https://[A-Za-z0-9.-]+/archives/[A-Z0-9]+/p\d+(?:\?[A-Za-z0-9_=&.-]*)?$")
INPUT_MAX = 3000
SECTION_MAX = 3000
OPTION_TEXT_MAX = 75

_FORM_FIELDS: list[tuple[str, bool, int]] = [
    # block_id, multiline, max_length; label and hint: kbform.field.<id> / kbform.hint.<id> in bot/present/i18n.py
    ("title", False, 140),
    ("title_zh", False, 80),
    ("cause", True, 3000),
    ("fix", True, 3000),
    ("signatures", True, 3000),
    ("examples", True, 3000),
    ("references", True, 3000),
]


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    return {"type": "plain_text", "text": plain_limited(text, limit), "emoji": True}


def _section(mrkdwn: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn[:SECTION_MAX]}}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(*items: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": t[:3000]} for t in items if t][:10]}


def _option(text: str, value: str, description: str | None = None) -> dict[str, Any]:
    option: dict[str, Any] = {"text": _plain(text, OPTION_TEXT_MAX), "value": value[:150]}
    if description:
        option["description"] = _plain(description, OPTION_TEXT_MAX)
    return option


def _modal(callback_id: str, blocks: list[dict[str, Any]], private_metadata: str = "", submit: str | None = None,
           close: str = "kbform.cancel", lang: Language = "en") -> dict[str, Any]:
    """`submit` and `close` are bot/present/i18n.py keys."""
    view: dict[str, Any] = {
        "type": "modal",
        "callback_id": callback_id,
        "title": _plain(t("kbform.modal_title", lang), 24),
        "close": _plain(t(close, lang), 24),
        "private_metadata": private_metadata[:3000],
        "blocks": blocks[:100],
    }
    if submit:
        view["submit"] = _plain(t(submit, lang), 24)
    return view


def _percent(value: float) -> str:
    return f"{round(max(0.0, min(1.0, value)) * 100)}%"


def similar_line(s: Similar, lang: Language = "en") -> str:
    extra = t("kbform.sig_hits", lang) if s.signature_hit else ""
    overlap = t("kbform.overlap", lang) if s.overlap else ""
    similar = t("kbform.similar", lang, pct=_percent(s.similarity))
    return f"• {escape_limited(s.title, 200)[0]} ({inline_code(s.case_id, 100)}, {similar}{extra}{overlap})"


# --- the form --------------------------------------------------------------------------------------------


def loading_view(lang: Language = "en") -> dict[str, Any]:
    text = t("kbform.loading", lang)
    return _modal(VIEW_CASE_FORM, [_section(f":hourglass_flowing_sand: {escape(text)}")], close="kbform.close", lang=lang)


def notice_view(text: str, emoji: str = ":warning:", lang: Language = "en") -> dict[str, Any]:
    body, _ = escape_limited(text, SECTION_MAX - 20)
    return _modal(VIEW_CASE_FORM, [_section(f"{emoji} {body}")], close="kbform.close", lang=lang)


def _text_input(block_id: str, label: str, multiline: bool, max_length: int, hint: str, value: str,
                optional: bool) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "plain_text_input",
        "action_id": INPUT_ACTION,
        "multiline": multiline,
        "max_length": max_length,
    }
    if value:
        element["initial_value"] = value[:max_length]
    return {
        "type": "input",
        "block_id": block_id,
        "label": _plain(label, 2000),
        "hint": _plain(hint, 2000),
        "optional": optional,
        "element": element,
    }


def _select(block_id: str, label: str, choices: Sequence[str], selected: str | None) -> dict[str, Any]:
    options = [_option(c, c) for c in choices]
    element: dict[str, Any] = {"type": "static_select", "action_id": INPUT_ACTION, "options": options}
    if selected in choices:
        element["initial_option"] = _option(selected, selected)  # type: ignore[arg-type]
    return {"type": "input", "block_id": block_id, "label": _plain(label), "element": element}


def case_form_view(submission_id: str, form: CaseForm, nearest: Sequence[Similar] = (), source_note: str = "",
                   lang: Language = "en") -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    blocks.append(_section(escape(t("kbform.intro", lang)), "intro"))
    if source_note:
        blocks.append(_context(escape_limited(source_note, 2000)[0]))
    if nearest:
        lines = [f"*{t('kbform.nearest', lang)}*", *(similar_line(s, lang) for s in nearest[:3])]
        blocks.append(_section("\n".join(lines)[:SECTION_MAX], "nearest"))
    values = form.as_dict()
    def field(block_id: str, multiline: bool, max_length: int) -> dict[str, Any]:
        return _text_input(block_id, t(f"kbform.field.{block_id}", lang), multiline, max_length,
                           t(f"kbform.hint.{block_id}", lang), values[block_id], block_id == "references")

    blocks.extend(field(*spec) for spec in _FORM_FIELDS[:2])
    blocks.append(_select("area", t("kbform.field.area", lang), list(AREAS), form.area or None))
    blocks.append(_select("severity", t("kbform.field.severity", lang), list(SEVERITIES), form.severity or "medium"))
    blocks.extend(field(*spec) for spec in _FORM_FIELDS[2:])
    return _modal(VIEW_CASE_FORM, blocks, private_metadata=submission_id, submit="kbform.submit", lang=lang)


def form_from_state(values: dict[str, Any]) -> CaseForm:
    """state.values of a submitted case form → CaseForm (missing fields are empty)."""

    def text(block: str) -> str:
        element = (values.get(block) or {}).get(INPUT_ACTION) or {}
        if element.get("type") == "static_select" or "selected_option" in element:
            return ((element.get("selected_option") or {}).get("value")) or ""
        return element.get("value") or ""

    return CaseForm(**{name: text(name) for name in
                       ("title", "title_zh", "area", "severity", "cause", "fix", "signatures", "examples", "references")})


def checking_view(submission_id: str, lang: Language = "en") -> dict[str, Any]:
    return _modal(
        VIEW_DUPLICATE,
        [_section(f":mag: {t('kbform.checking', lang)}")],
        private_metadata=submission_id,
        close="kbform.close",
        lang=lang,
    )


def duplicate_view(submission_id: str, title: str, duplicates: Sequence[Similar], warnings: Sequence[str] = (),
                   lang: Language = "en") -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        _section(
            f":warning: *{t('kbform.dup_head', lang)}*\n{t('kbform.dup_yours', lang)}: *{escape_limited(title, 300)[0]}*\n"
            + "\n".join(similar_line(s, lang) for s in duplicates[:3]),
            "duplicates",
        )
    ]
    for w in list(warnings)[:3]:
        blocks.append(_context(":triangular_flag_on_post: " + escape_limited(w, 500)[0]))
    options = [
        _option(t("kbform.dup_example", lang, title=s.title), CHOICE_EXAMPLE_PREFIX + s.case_id,
                t("kbform.dup_case", lang, case=s.case_id, pct=_percent(s.similarity)))
        for s in duplicates[:3]
    ]
    options.append(_option(t("kbform.dup_new", lang), CHOICE_NEW, t("kbform.dup_new_hint", lang)))
    blocks.append(
        {
            "type": "input",
            "block_id": CHOICE_BLOCK,
            "label": _plain(t("kbform.dup_question", lang)),
            "element": {"type": "radio_buttons", "action_id": INPUT_ACTION, "options": options,
                        "initial_option": options[0]},
        }
    )
    return _modal(VIEW_DUPLICATE, blocks, private_metadata=submission_id, submit="kbform.send_review", lang=lang)


def choice_from_state(values: dict[str, Any]) -> str:
    element = (values.get(CHOICE_BLOCK) or {}).get(INPUT_ACTION) or {}
    value = ((element.get("selected_option") or {}).get("value")) or CHOICE_NEW
    return value.removeprefix(CHOICE_EXAMPLE_PREFIX) if value.startswith(CHOICE_EXAMPLE_PREFIX) else CHOICE_NEW


def submitted_view(*, kind: str, title: str, target_case: str | None, reviewers_configured: bool,
                   lang: Language = "en") -> dict[str, Any]:
    what = (
        t("kbform.sent_example", lang, case=inline_code(target_case or "", 100))
        if kind == "example"
        else f"*{escape_limited(title, 300)[0]}*"
    )
    text = t("kbform.sent" if reviewers_configured else "kbform.saved_no_reviewers", lang, what=what)
    return _modal(VIEW_DUPLICATE, [_section(text)], close="kbform.done", lang=lang)


# --- review ----------------------------------------------------------------------------------------------


def review_message(
    *,
    submission_id: str,
    kind: str,
    author_id: str,
    case: dict[str, Any],
    target_case: str | None,
    nearest: Sequence[Similar] = (),
    warnings: Sequence[str] = (),
    permalink: str | None = None,
    editable: bool = False,
) -> Message:
    """editable: a case drafted by the team-learning loop; reviewers get an Edit button beside Approve / Reject."""
    title = str(case.get("title", ""))
    if kind == "example":
        head = (f":inbox_tray: *New example for KB case {inline_code(target_case or '', 100)}* from "
                f"{user_mention(author_id)}")
        fallback = f"New example for KB case {target_case}"
    elif editable:
        head = ":bulb: *Drafted KB case for review*: one unknown failure pasted in several threads (team-learning loop)"
        fallback = f"Drafted KB case for review: {title}"
    else:
        head = f":inbox_tray: *New KB case for review* from {user_mention(author_id)}"
        fallback = f"New KB case for review: {title}"
    blocks: list[dict[str, Any]] = [_section(head, "review_head")]
    meta = f"*{escape_limited(title, 300)[0]}*\narea {escape(str(case.get('area', '')))} · severity {escape(str(case.get('severity', '')))}"
    if kind != "example":
        meta += f" · id {inline_code(str(case.get('id', '')), 120)}"
    blocks.append(_section(meta, "review_title"))
    if kind != "example" and case.get("cause"):
        blocks.append(_section("*Cause*\n" + escape_limited(str(case["cause"]), 2800)[0], "review_cause"))
    steps = case.get("fix") or []
    if kind != "example" and steps:
        parts = []
        for i, step in enumerate(steps[:10], 1):
            part = f"{i}. {escape_limited(str(step.get('text', '')), 400)[0]}"
            if step.get("command"):
                part += "\n" + code_block(str(step["command"]), 500)[0]
            parts.append(part)
        blocks.append(_section(("*Fix*\n" + "\n".join(parts))[:SECTION_MAX], "review_fix"))
    signatures = "\n".join(case.get("signatures") or [])
    if signatures:
        blocks.append(_section("*Signatures*\n" + code_block(signatures, 1400)[0], "review_signatures"))
    examples = case.get("examples") or []
    if examples:
        first = examples[0]
        source = escape_limited(str(first.get("source", "")), 300)[0]
        blocks.append(
            _section(
                f"*Example* ({len(examples)} in all; first from {source})\n" + code_block(str(first.get("log", "")), 2400)[0],
                "review_example",
            )
        )
    notes = []
    if nearest:
        notes.append("Nearest known: " + "; ".join(
            f"{inline_code(s.case_id, 80)} {_percent(s.similarity)}" for s in nearest[:3]))
    for w in list(warnings)[:3]:
        notes.append(":triangular_flag_on_post: " + escape_limited(w, 400)[0])
    if kind != "example" and not _has_chinese_text(case):
        notes.append(":cn: No Chinese text yet (summary_zh, cause_zh, fix text_zh): Chinese askers see the English "
                     "text until someone adds it; `vllm-doctor kb lint` lists it for bundled cases")
    if permalink and _PERMALINK_RE.match(permalink):
        notes.append(f"<{permalink.replace('&', '&amp;')}|source message>")
    if notes:
        blocks.append(_context(*notes))
    blocks.append(
        {
            "type": "actions",
            "block_id": "review_actions",
            "elements": [
                {"type": "button", "text": _plain("Approve", 75), "style": "primary",
                 "action_id": ACTION_REVIEW_APPROVE, "value": submission_id},
                *([{"type": "button", "text": _plain("Edit", 75), "action_id": ACTION_REVIEW_EDIT,
                    "value": submission_id}] if editable else []),
                {"type": "button", "text": _plain("Reject", 75), "style": "danger",
                 "action_id": ACTION_REVIEW_REJECT, "value": submission_id},
            ],
        }
    )
    return Message(text=plain_limited(escape(fallback), 3000), blocks=blocks)


def _has_chinese_text(case: dict[str, Any]) -> bool:
    steps = case.get("fix") or []
    return bool(case.get("cause_zh")) and all(step.get("text_zh") for step in steps)


def decided_message(
    *, approved: bool, reviewer_id: str, title: str, case_id: str | None, live_seconds: float | None = None,
    path: str | None = None, commit: str | None = None,
) -> Message:
    if approved:
        text = (f":white_check_mark: *Approved* by {user_mention(reviewer_id)}: {inline_code(case_id or '', 120)} "
                f"— {escape_limited(title, 300)[0]}")
        notes = []
        if live_seconds is not None:
            notes.append(f"live in {live_seconds * 1000:.0f} ms")
        if path:
            notes.append(inline_code(path, 300))
        if commit:
            notes.append(escape_limited(commit, 300)[0])
        blocks = [_section(text, "review_head")]
        if notes:
            blocks.append(_context(" · ".join(notes)))
        return Message(text=plain_limited(f"Approved: {case_id}", 3000), blocks=blocks)
    text = f":no_entry_sign: *Rejected* by {user_mention(reviewer_id)}: {escape_limited(title, 300)[0]}"
    return Message(text="Rejected KB case", blocks=[_section(text, "review_head")])


def author_notice(*, approved: bool, title: str, case_id: str | None, kind: str, reviewer_id: str,
                  note: str = "") -> Message:
    if approved:
        what = (f"Your log is now an example of KB case {inline_code(case_id or '', 120)}" if kind == "example"
                else f"Your KB case *{escape_limited(title, 300)[0]}* is live as {inline_code(case_id or '', 120)}")
        text = f":tada: {what} (approved by {user_mention(reviewer_id)}). The next paste of this error gets it."
        fallback = f"Your KB case was approved: {case_id}"
    else:
        text = f":no_entry_sign: Your KB case *{escape_limited(title, 300)[0]}* was not accepted by {user_mention(reviewer_id)}."
        if note:
            text += f"\n>{escape_limited(note, 1000)[0]}"
        fallback = "Your KB case was not accepted"
    return Message(text=plain_limited(escape(fallback), 3000), blocks=[_section(text)])


def refusal(text: str) -> Message:
    body, _ = escape_limited(text, 2900)
    return Message(text=plain_limited(escape(text), 3000), blocks=[_section(f":lock: {body}")])


def ephemeral(text: str, emoji: str = ":information_source:") -> Message:
    """A short reply whose text we wrote and already escaped (mentions allowed)."""
    return Message(text=plain_limited(text, 3000), blocks=[_section(f"{emoji} {text}"[:SECTION_MAX])])


# --- feedback and the App Home ------------------------------------------------------------------------------


def feedback_thanks(*, value: str, case_id: str | None, outcome: str | None, changed_from: str | None,
                    lang: Language = "en") -> Message:
    what = t("kbform.thanks_what_case", lang, case=inline_code(case_id, 120)) if case_id \
        else t("kbform.thanks_what_answer", lang)
    if value == "fixed":
        text = t("kbform.thanks_fixed", lang, what=what)
        if outcome:
            text += t("kbform.thanks_outcome", lang, outcome=escape(outcome))
    else:
        text = t("kbform.thanks_not_helpful", lang, what=what)
    if changed_from and changed_from != value:
        text += t("kbform.thanks_replaced", lang)
    return ephemeral(text, ":pray:")


def outcome_context(outcome: str | None, lang: Language = "en") -> dict[str, Any] | None:
    """A context block "KB case outcome: solved 9 of 10" for an answer (None without votes)."""
    if not outcome:
        return None
    return _context(t("kbform.outcome", lang, outcome=escape(outcome)))


def home_section(candidates: Sequence[Any], pending: int, limit: int = 8, lang: Language = "en") -> list[dict[str, Any]]:
    """App Home blocks: candidates for new cases (logs that got "unknown" or "Didn't help")."""
    blocks: list[dict[str, Any]] = [{"type": "divider"}, _section(t("kbhome.head", lang), "kb_candidates_head")]
    if pending:
        blocks.append(_context(t("kbhome.pending", lang, n=pending)))
    if not candidates:
        blocks.append(_context(t("kbhome.none", lang)))
        return blocks
    for c in candidates[:limit]:
        why = t("kbhome.no_match", lang) if c.reason == "unknown" \
            else t("kbhome.not_helped", lang, case=inline_code(c.case_id or "?", 80))
        seen = t("kbhome.seen", lang, n=c.seen) if c.seen > 1 else ""
        blocks.append(_context(f"{inline_code(c.summary or t('kbhome.no_error_line', lang), 200)} · {why}{seen}"))
    return blocks


def home_section_for(growth: Any, limit: int = 8, lang: Language = "en", user: str | None = None) -> list[dict[str, Any]]:
    """home_section() from a bot.kb_growth.KBGrowth (for the App Home tab); [] without one. A KB reviewer also
    gets the Retrain button (the learned ranker on the labelled logs plus the team's votes and accepted cases)."""
    if growth is None:
        return []
    blocks = home_section(growth.candidates.open(limit), growth.submissions.counts().get("pending", 0), limit, lang)
    if user and growth.reviewers.is_reviewer(user):
        blocks.append({"type": "actions", "block_id": "kb_retrain", "elements": [
            {"type": "button", "text": _plain("Retrain ranker", 75), "action_id": ACTION_RETRAIN, "value": "retrain"}]})
    return blocks
