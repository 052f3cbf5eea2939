"""Help and the App Home tab: what the bot does and how to ask it (pure functions, golden-tested)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.i18n import Language, t
from bot.slack.recent import AnswerRecord
from bot.slack.reply.kit import VIEW_BLOCKS_MAX, Message, _context, _header, _section
from bot.slack.reply.mrkdwn import (
    channel_link,
    escape,
    escape_limited,
    inline_code,
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
