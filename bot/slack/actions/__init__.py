"""Buttons on every answer (block_actions). Each one answers when pressed; none is silently dead.

"Fixed it", "Didn't help" and "Add as a KB case" belong to the KB-growth feature and are registered by
bot/slack/listeners/kb_growth.py; "Run diagnostics on a host" and "Draft a vLLM issue" live here.
"""

from __future__ import annotations

from typing import Any

from bot.slack.actions.draft_issue import draft_issue
from bot.slack.actions.run_diagnostics import run_diagnostics
from bot.slack.deps import SlackDeps
from bot.slack.reply import kit


def register(app: Any, deps: SlackDeps) -> None:
    app.action(kit.ACTION_RUN_DIAGNOSTICS)(run_diagnostics(deps))
    app.action(kit.ACTION_DRAFT_ISSUE)(draft_issue(deps))
