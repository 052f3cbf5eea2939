"""Modal submissions."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.reply import hosts as host_replies
from bot.slack.views.host_picker import host_picker_submitted


def register(app: Any, deps: SlackDeps) -> None:
    app.view(host_replies.HOST_PICKER_CALLBACK)(host_picker_submitted(deps))
