"""Help and the App Home tab: what the bot does and how to ask it (pure functions, golden-tested)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.present.i18n import Language, t
from bot.slack.recent import AnswerRecord
from bot.slack.reply.kit import VIEW_BLOCKS_MAX, Message, _context, _header, _section
from bot.slack.reply.mrkdwn import (
    channel_link,
    escape,
    escape_limited,
    inline_code,
)

HELP_TEXT = t("slack.help.body", "en")  # the text lives in bot/present/i18n.py (both languages)


def help_message(*, max_bytes: int, watch_channels: Sequence[str], runner_enabled: bool,
                 lang: Language = "en") -> Message:
    watch = ""
    if watch_channels:
        links = ", ".join(channel_link(c) for c in watch_channels[:10])
        watch = t("slack.help.watch", lang, links=links)
    runner = "" if runner_enabled else t("slack.help.runner_off", lang)
    text = t("slack.help.body", lang, max_mb=max(1, max_bytes // (1024 * 1024)), watch=watch, runner=runner)
    return Message(text=t("slack.help.title", lang), blocks=[_section(text.strip(), "help")])


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
    blocks.extend(help_message(max_bytes=max_bytes, watch_channels=watch_channels, runner_enabled=runner_enabled,
                               lang=lang).blocks)
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
        mark = t(f"slack.home.mark_{feedback}", lang) if feedback in ("fixed", "not_helpful") else ""
        verdict = t(f"verdict.word.{record.verdict}", lang) if record.verdict in ("match", "uncertain", "unknown") \
            else escape(record.verdict)
        blocks.append(_context([t("slack.home.line", lang, ago=_ago(now - record.created, lang),
                                  channel=channel_link(record.channel_id), verdict=verdict, what=what, mark=mark)]))
    return {"type": "home", "blocks": blocks[:VIEW_BLOCKS_MAX]}


def _ago(seconds: float, lang: Language = "en") -> str:
    if seconds < 90:
        return t("slack.ago.now", lang)
    if seconds < 3600 * 1.5:
        return t("slack.ago.min", lang, n=round(seconds / 60))
    if seconds < 86400 * 1.5:
        return t("slack.ago.h", lang, n=round(seconds / 3600))
    return t("slack.ago.days", lang, n=round(seconds / 86400))
