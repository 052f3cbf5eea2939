""""Diagnose this message": works on anyone's message, the answer goes in that message's thread (or
privately via the response_url when the bot is not in the channel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.slack.conversation import LogRequest, diagnose_and_answer
from bot.slack.deps import SlackDeps
from bot.slack.incoming import Where, slack_to_plain

DIAGNOSE_MESSAGE_CALLBACK = "diagnose_message"


def diagnose_message(deps: SlackDeps) -> Callable[..., None]:
    def on_diagnose_message(ack: Any, shortcut: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        message = shortcut.get("message") or {}
        where = Where(
            channel=(shortcut.get("channel") or {}).get("id", ""),
            user=(shortcut.get("user") or {}).get("id"),
            thread_ts=message.get("thread_ts") or message.get("ts"),
            respond=respond,
        )
        request = LogRequest(where, slack_to_plain(message.get("text") or ""), message.get("files") or [])
        deps.workers.submit(diagnose_and_answer, deps, client, request)

    return on_diagnose_message
