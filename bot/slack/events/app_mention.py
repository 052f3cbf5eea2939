"""`@vLLM Doctor <log>` in a channel or thread; `@vLLM Doctor` alone in the thread of a pasted log;
`@vLLM Doctor diagnose host01 [check…]` (slash commands do not work inside threads)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.slack.conversation import LogRequest, Where, diagnose_and_answer, tell_user
from bot.slack.deps import SlackDeps
from bot.slack.hosts import start_host_diagnosis
from bot.slack.incoming import host_request, slack_to_plain, strip_bot_mention
from bot.slack.reply import home as home_blocks


def app_mention(deps: SlackDeps) -> Callable[..., None]:
    def on_app_mention(event: dict[str, Any], client: Any, context: Any) -> None:
        bot_user_id = context.get("bot_user_id") or deps.bot_user_id
        raw = strip_bot_mention(event.get("text", ""), bot_user_id)
        files = event.get("files") or []
        where = Where(
            channel=event["channel"],
            user=event.get("user"),
            thread_ts=event.get("thread_ts") or event["ts"],
        )
        if (target := host_request(raw)) is not None and not files:
            start_host_diagnosis(deps, client, where, target[0], target[1])
            return
        if raw or files:
            deps.workers.submit(diagnose_and_answer, deps, client, LogRequest(where, slack_to_plain(raw), files))
            return
        if event.get("thread_ts"):
            deps.workers.submit(_diagnose_thread_parent, deps, client, where, event["thread_ts"], bot_user_id)
            return
        tell_user(
            client,
            where,
            home_blocks.help_message(
                max_bytes=deps.max_bytes, watch_channels=sorted(deps.watch_channels), runner_enabled=deps.runner_enabled,
                lang=deps.locales.language_of(client, where.user) or "en",
            ),
        )

    return on_app_mention


def _diagnose_thread_parent(deps: SlackDeps, client: Any, where: Where, thread_ts: str, bot_user_id: str | None) -> None:
    """A bare mention inside a thread means "diagnose the log this thread is about"."""
    replies = client.conversations_replies(channel=where.channel, ts=thread_ts, limit=1, inclusive=True)
    messages = replies.get("messages") or []
    parent = messages[0] if messages else {}
    text = strip_bot_mention(parent.get("text", ""), bot_user_id)
    diagnose_and_answer(deps, client, LogRequest(where, slack_to_plain(text), parent.get("files") or []))
