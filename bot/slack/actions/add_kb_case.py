""""Add as a KB case": until the KB-from-Slack modal exists, say plainly what it will do and what to do now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.slack import blocks
from bot.slack.deps import SlackDeps

NOT_YET = (
    "Adding cases from Slack is coming: this button will open a form pre-filled with this log's evidence lines, "
    "for you to add the cause and the fix; the case then goes to the KB maintainers for review. Until then, "
    "please send a KB maintainer a link to this thread (the format is in docs/kb-authoring.md)."
)


def add_kb_case(deps: SlackDeps) -> Callable[..., None]:
    def on_add_kb_case(ack: Any, respond: Any) -> None:
        ack()
        message = blocks.notice(NOT_YET, ":heavy_plus_sign:")
        respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)

    return on_add_kb_case
