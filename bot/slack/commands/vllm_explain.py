"""`/vllm-explain <log>`: the answer is posted in the channel (naming the asker) and its thread holds
the details; where the bot cannot post, the answer comes back privately through the response_url."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.errors import UserInputError
from bot.present.i18n import t
from bot.slack.conversation import LogRequest, Where, diagnose_and_answer
from bot.slack.deps import SlackDeps
from bot.slack.files import check_text_size
from bot.slack.incoming import slack_to_plain
from bot.slack.reply import kit

USAGE = t("slack.usage.explain", "en")  # both languages in bot/present/i18n.py


def vllm_explain(deps: SlackDeps) -> Callable[..., None]:
    def on_vllm_explain(ack: Any, command: dict[str, Any], client: Any, respond: Any) -> None:
        text = slack_to_plain(command.get("text") or "")
        if not text.strip() or text.strip().lower() == "help":
            lang = deps.locales.language_of(client, command.get("user_id")) or "en"  # cached: the ack stays fast
            ack(**kit.notice(t("slack.usage.explain", lang)).as_kwargs())
            return
        try:
            check_text_size(text, deps.max_bytes, "That log")
        except UserInputError as exc:
            ack(**kit.input_error(str(exc)).as_kwargs())
            return
        ack()
        where = Where(channel=command["channel_id"], user=command.get("user_id"), thread_ts=None, respond=respond)
        deps.workers.submit(diagnose_and_answer, deps, client, LogRequest(where, text, mention_asker=True))

    return on_vllm_explain
