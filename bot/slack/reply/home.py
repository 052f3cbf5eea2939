"""The help message and the App Home tab."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.slack.recent import AnswerRecord
from bot.slack.reply.kit import VIEW_BLOCKS_MAX, Message, context, header, section
from bot.slack.reply.mrkdwn import channel_link, escape, escape_limited, inline_code

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
    return Message(text="How to use vLLM Doctor", blocks=[section(text.strip(), "help")])


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
) -> dict[str, Any]:
    """The App Home tab: usage, KB size, the viewer's recent diagnoses."""
    now = time.time() if now is None else now
    blocks: list[dict[str, Any]] = [header("vLLM Doctor")]
    stats = [
        f":books: *{kb_size}* known failure cases in the knowledge base",
        ":robot_face: LLM explanations on" if llm_enabled else ":robot_face: LLM explanations off (KB-only answers)",
        ":desktop_computer: Host diagnostics on" if runner_enabled else ":desktop_computer: Host diagnostics not configured",
    ]
    blocks.append(context(stats, "stats"))
    blocks.extend(help_message(max_bytes=max_bytes, watch_channels=watch_channels, runner_enabled=runner_enabled).blocks)
    blocks.append({"type": "divider"})
    blocks.append(section("*Your recent diagnoses*", "recent_head"))
    if not recent:
        blocks.append(context(["Nothing yet: paste a log in the Messages tab to try it."], "recent_empty"))
    for record in recent[:10]:
        if record.case_id:
            what = f"{escape_limited(record.title or record.case_id, 150)[0]} ({inline_code(record.case_id, 100)})"
        else:
            what = "no confident match"
        feedback = record.feedback.get(user_id)
        mark = {"fixed": " · :white_check_mark: fixed", "not_helpful": " · :x: didn't help"}.get(feedback or "", "")
        ago = _ago(now - record.created)
        blocks.append(context([f"{ago} in {channel_link(record.channel_id)}: {escape(record.verdict)} · {what}{mark}"]))
    return {"type": "home", "blocks": blocks[:VIEW_BLOCKS_MAX]}


def _ago(seconds: float) -> str:
    if seconds < 90:
        return "just now"
    if seconds < 3600 * 1.5:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400 * 1.5:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"
