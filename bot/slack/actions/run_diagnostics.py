""""Run diagnostics on a host": opens the host picker (trigger_id lives 3 s, so views.open happens
right here, not on a worker); without a configured runner it says so."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.present.i18n import t
from bot.slack.deps import SlackDeps
from bot.slack.reply import hosts as host_blocks
from bot.slack.reply import kit


def run_diagnostics(deps: SlackDeps) -> Callable[..., None]:
    def on_run_diagnostics(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        user = (body.get("user") or {}).get("id")
        lang = deps.locales.language_of(client, user) or "en"
        if deps.hosts is None:
            message = kit.notice(t("slack.host.not_configured", lang), ":desktop_computer:")
            respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            return
        container = body.get("container") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        source = body.get("message") or {}  # the answer the button sits on
        # "ANSWER_ID" or, from an answer's root-line button, "ANSWER_ID checks:a,b" (kb/triage ids; the picker
        # still validates them against the catalogue)
        answer_id, _, checks = str(action.get("value") or "").partition(" checks:")
        metadata = json.dumps(
            {
                "answer_id": answer_id,
                "checks": [c for c in checks.split(",") if c][:8],
                "channel": channel,
                "thread_ts": source.get("thread_ts") or source.get("ts") or container.get("message_ts"),
            }
        )
        client.views_open(
            trigger_id=body["trigger_id"],
            view=host_blocks.host_picker_view(
                private_metadata=metadata,
                hosts_hint=deps.hosts.picker_hint(client, user, channel, lang),
                lang=lang,
            ),
        )

    return on_run_diagnostics
