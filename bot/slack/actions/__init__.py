"""Buttons on every answer (block_actions). Each one answers when pressed; none is silently dead.

"Fixed it", "Didn't help", "Add as a KB case" and a reviewer's Approve / Edit / Reject belong to the KB-growth
feature (shared code: bot/slack/kb_growth_edge.py).
"""

from __future__ import annotations

from typing import Any

from bot.slack.actions.add_kb_case import add_kb_case
from bot.slack.actions.answer_feedback import answer_feedback
from bot.slack.actions.draft_issue import draft_issue
from bot.slack.actions.edit_kb_draft import edit_kb_draft
from bot.slack.actions.retrain_ranker import retrain_ranker
from bot.slack.actions.review_kb_case import review_kb_case
from bot.slack.actions.run_diagnostics import run_diagnostics
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import growth_of
from bot.slack.reply import kb_growth as kbb
from bot.slack.reply import kit


def register(app: Any, deps: SlackDeps) -> None:
    growth = growth_of(deps)
    app.action(kit.ACTION_ADD_KB_CASE)(add_kb_case(deps, growth))
    app.action(kit.ACTION_FIXED)(answer_feedback(deps, growth, "fixed"))
    app.action(kit.ACTION_NOT_HELPFUL)(answer_feedback(deps, growth, "not_helpful"))
    app.action(kbb.ACTION_REVIEW_APPROVE)(review_kb_case(deps, growth, approve=True))
    app.action(kbb.ACTION_REVIEW_REJECT)(review_kb_case(deps, growth, approve=False))
    app.action(kbb.ACTION_REVIEW_EDIT)(edit_kb_draft(deps, growth))
    app.action(kbb.ACTION_RETRAIN)(retrain_ranker(deps, growth))
    app.action(kit.ACTION_RUN_DIAGNOSTICS)(run_diagnostics(deps))
    app.action(kit.ACTION_DRAFT_ISSUE)(draft_issue(deps))
