"""Modal submissions."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.reply import hosts as blocks
from bot.slack.views.host_picker import host_picker_submitted


def register(app: Any, deps: SlackDeps) -> None:
    app.view(blocks.HOST_PICKER_CALLBACK)(host_picker_submitted(deps))
