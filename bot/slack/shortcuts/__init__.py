"""Message shortcuts (the ⋮ menu on a message)."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.shortcuts.diagnose_message import DIAGNOSE_MESSAGE_CALLBACK, diagnose_message


def register(app: Any, deps: SlackDeps) -> None:
    app.shortcut(DIAGNOSE_MESSAGE_CALLBACK)(diagnose_message(deps))
