"""Message shortcuts (the ⋮ menu on a message)."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import growth_of
from bot.slack.reply import kb_growth as kbb
from bot.slack.shortcuts.add_to_kb import add_to_kb
from bot.slack.shortcuts.diagnose_message import DIAGNOSE_MESSAGE_CALLBACK, diagnose_message


def register(app: Any, deps: SlackDeps) -> None:
    app.shortcut(kbb.SHORTCUT_ADD_TO_KB)(add_to_kb(deps, growth_of(deps)))
    app.shortcut(DIAGNOSE_MESSAGE_CALLBACK)(diagnose_message(deps))
