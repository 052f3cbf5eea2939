"""The duplicate choice submitted (new case, or an addition to a near one): the submission goes for
review; a choice it cannot take goes back inline in the ack."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.errors import UserInputError
from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import ERROR_TEXT_MAX, language_of, request_review, user_of
from bot.slack.reply import kb_growth as kbb


def kb_case_duplicate_chosen(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_duplicate_choice(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        sub_id = str(view.get("private_metadata") or "")
        choice = kbb.choice_from_state((view.get("state") or {}).get("values") or {})
        try:
            sub = growth.submit(sub_id, choice)
        except UserInputError as exc:
            ack(response_action="errors", errors={kbb.CHOICE_BLOCK: str(exc)[:ERROR_TEXT_MAX]})
            return
        ack(response_action="update", view=kbb.submitted_view(
            kind=sub.kind, title=sub.title, target_case=sub.target_case, reviewers_configured=growth.reviewers.configured,
            lang=language_of(deps, client, user_of(body)[0])))
        deps.workers.submit(request_review, deps, growth, client, sub)

    return on_duplicate_choice

