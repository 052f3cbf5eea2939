"""`/vllm-diagnose help` and `/vllm-diagnose <host|group> [check… | tier N]`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.present.i18n import Language, t
from bot.slack.conversation import Where
from bot.slack.deps import SlackDeps
from bot.slack.hosts import start_host_diagnosis
from bot.slack.reply import home as home_blocks
from bot.slack.reply import kit


def vllm_diagnose(deps: SlackDeps) -> Callable[..., None]:
    def on_vllm_diagnose(ack: Any, command: dict[str, Any], client: Any, respond: Any) -> None:
        words = (command.get("text") or "").split()
        is_help = not words or words[0].lower() in ("help", "-h", "--help", "?")
        lang: Language = "en"
        if is_help or deps.hosts is None:  # the locale is cached after one look-up: the ack stays inside 3 s
            lang = deps.locales.language_of(client, command.get("user_id")) or "en"
        if is_help:
            ack(
                **home_blocks.help_message(
                    max_bytes=deps.max_bytes,
                    watch_channels=sorted(deps.watch_channels),
                    runner_enabled=deps.runner_enabled,
                    lang=lang,
                ).as_kwargs()
            )
            return
        if deps.hosts is None:
            ack(**kit.notice(t("slack.host.not_configured", lang)).as_kwargs())
            return
        ack()
        where = Where(channel=command["channel_id"], user=command.get("user_id"), thread_ts=None, respond=respond)
        start_host_diagnosis(deps, client, where, words[0], words[1:])

    return on_vllm_diagnose
