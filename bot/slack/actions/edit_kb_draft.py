"""Edit (button on a case the team-learning loop drafted): reviewers only; the draft is dismissed and the case
form opens pre-filled with it, so the edited case goes through the usual check and review."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.errors import PermissionDenied, ReviewConflict
from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import language_of, safe_update, user_of
from bot.slack.reply import kb_growth as kbb
from bot.slack.reply.mrkdwn import escape

log = logging.getLogger(__name__)


def edit_kb_draft(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_edit(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        user_id, user_name = user_of(body)
        if not growth.reviewers.is_reviewer(user_id):
            message = kbb.ephemeral("Only KB reviewers can edit drafted cases.", ":lock:")
            respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            return
        lang = language_of(deps, client, user_id)
        view_id = client.views_open(trigger_id=body["trigger_id"], view=kbb.loading_view(lang))["view"]["id"]
        deps.workers.submit(_open_form, growth, client, view_id, str(action.get("value") or ""), user_id, user_name,
                            lang)

    return on_edit


def _open_form(growth: KBGrowth, client: Any, view_id: str, sub_id: str, user_id: str, user_name: str,
               lang: Any) -> None:
    try:
        new, form = growth.edit_draft(sub_id, user_id, user_name)
    except (PermissionDenied, ReviewConflict) as exc:
        safe_update(client, view_id, kbb.notice_view(escape(str(exc)), lang=lang))
        return
    except Exception:
        log.exception("could not open drafted case %s for editing", sub_id)
        safe_update(client, view_id, kbb.notice_view("Sorry, that failed on my side. Try again.", lang=lang))
        return
    safe_update(client, view_id, kbb.case_form_view(new.id, form, (), f"Drafted case {sub_id}, edited", lang))
