"""Modal submissions: the host picker; the KB case form and its duplicate choice (KB growth)."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import growth_of
from bot.slack.reply import hosts as blocks
from bot.slack.reply import kb_growth as kbb
from bot.slack.views.host_picker import host_picker_submitted
from bot.slack.views.kb_case_duplicate import kb_case_duplicate_chosen
from bot.slack.views.kb_case_form import kb_case_form_submitted


def register(app: Any, deps: SlackDeps) -> None:
    growth = growth_of(deps)
    app.view(kbb.VIEW_CASE_FORM)(kb_case_form_submitted(deps, growth))
    app.view(kbb.VIEW_DUPLICATE)(kb_case_duplicate_chosen(deps, growth))
    app.view(blocks.HOST_PICKER_CALLBACK)(host_picker_submitted(deps))
