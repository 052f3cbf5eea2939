""""Add as a KB case" (button on an answer): opens the case form at once (loading), then a worker
pre-fills it from the answered thread's first human message (bot/slack/kb_growth_edge.py: prefill)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import Source, language_of, prefill, user_of
from bot.slack.reply import kb_growth as kbb


def add_kb_case(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_add_kb_case(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any) -> None:
        ack()
        record = deps.recent.get(str(action.get("value") or ""))
        message = body.get("message") or {}
        container = body.get("container") or {}
        channel = (record.channel_id if record else None) or (body.get("channel") or {}).get("id") or container.get("channel_id", "")
        root = (record.thread_ts if record else None) or message.get("thread_ts") or container.get("thread_ts")
        author_id, author_name = user_of(body)
        source = Source(
            channel=channel,
            ts=None,
            thread_ts=root,
            text="",
            author_id=author_id,
            author_name=author_name,
            team_domain=str((body.get("team") or {}).get("domain") or ""),
        )
        lang = language_of(deps, client, author_id)
        view_id = client.views_open(trigger_id=body["trigger_id"], view=kbb.loading_view(lang))["view"]["id"]
        deps.workers.submit(prefill, deps, growth, client, view_id, source, lang)

    return on_add_kb_case

