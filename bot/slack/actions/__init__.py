"""Buttons on every answer (block_actions). Each one answers when pressed; none is silently dead."""

from __future__ import annotations

from typing import Any

from bot.slack import blocks
from bot.slack.actions.add_kb_case import add_kb_case
from bot.slack.actions.feedback import feedback
from bot.slack.actions.run_diagnostics import run_diagnostics
from bot.slack.deps import SlackDeps


def register(app: Any, deps: SlackDeps) -> None:
    app.action(blocks.ACTION_FIXED)(feedback(deps, "fixed"))
    app.action(blocks.ACTION_NOT_HELPFUL)(feedback(deps, "not_helpful"))
    app.action(blocks.ACTION_RUN_DIAGNOSTICS)(run_diagnostics(deps))
    app.action(blocks.ACTION_ADD_KB_CASE)(add_kb_case(deps))
