""""Add to vLLM KB" (message shortcut): opens the case form at once (loading), then a worker pre-fills it
from the message, its files and its thread (bot/slack/kb_growth_edge.py: prefill)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.incoming import slack_to_plain
from bot.slack.kb_growth_edge import Source, language_of, prefill, user_of
from bot.slack.reply import kb_growth as kbb


def add_to_kb(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_add_to_kb(ack: Any, shortcut: dict[str, Any], client: Any) -> None:
        ack()
        message = shortcut.get("message") or {}
        author_id, author_name = user_of(shortcut)
        source = Source(
            channel=(shortcut.get("channel") or {}).get("id", ""),
            ts=message.get("ts"),
            thread_ts=message.get("thread_ts"),
            text=slack_to_plain(message.get("text") or ""),
            files=list(message.get("files") or []),
            author_id=author_id,
            author_name=author_name,
            team_domain=str((shortcut.get("team") or {}).get("domain") or ""),
        )
        lang = language_of(deps, client, author_id)
        view_id = client.views_open(trigger_id=shortcut["trigger_id"], view=kbb.loading_view(lang))["view"]["id"]
        deps.workers.submit(prefill, deps, growth, client, view_id, source, lang)

    return on_add_to_kb

