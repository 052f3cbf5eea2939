"""The KB case form submitted: schema and KB-rule errors go back inline in the ack; otherwise "checking…",
and a worker looks for near-duplicates (→ the duplicate choice) or sends the case for review."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.errors import InvalidCase, ReviewConflict, UserInputError
from bot.kb_growth import KBGrowth
from bot.present.i18n import Language, t
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import ERROR_TEXT_MAX, language_of, request_review, safe_update, user_of
from bot.slack.reply import kb_growth as kbb

log = logging.getLogger(__name__)


def kb_case_form_submitted(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    form_blocks = {"title", "title_zh", "area", "severity", "cause", "fix", "signatures", "examples", "references"}

    def on_case_form(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        sub_id = str(view.get("private_metadata") or "")
        form = kbb.form_from_state((view.get("state") or {}).get("values") or {})
        try:
            case, _report = growth.validate(form)
        except InvalidCase as exc:
            errors: dict[str, str] = {}
            for name, message in exc.problems.items():
                errors.setdefault(name if name in form_blocks else "title", message[:ERROR_TEXT_MAX])
            ack(response_action="errors", errors=errors)
            return
        lang = language_of(deps, client, user_of(body)[0])
        ack(response_action="update", view=kbb.checking_view(sub_id, lang))
        deps.workers.submit(_check_and_route, deps, growth, client, (body.get("view") or {}).get("id", ""), sub_id, case,
                            lang)

    return on_case_form


def _check_and_route(deps: SlackDeps, growth: KBGrowth, client: Any, view_id: str, sub_id: str, case: Any,
                     lang: Language = "en") -> None:
    try:
        checked = growth.check(case)
        growth.stage(sub_id, checked)
        if checked.duplicates:
            warnings = [w.message for w in checked.report.warnings]
            safe_update(client, view_id, kbb.duplicate_view(sub_id, checked.case.title, checked.duplicates, warnings,
                                                             lang))
            return
        sub = growth.submit(sub_id, "new")
        safe_update(client, view_id, kbb.submitted_view(kind=sub.kind, title=sub.title, target_case=None,
                                                         reviewers_configured=growth.reviewers.configured, lang=lang))
        request_review(deps, growth, client, sub)
    except (UserInputError, ReviewConflict) as exc:
        safe_update(client, view_id, kbb.notice_view(str(exc), lang=lang))
    except Exception:
        log.exception("KB case check failed for submission %s", sub_id)
        safe_update(client, view_id, kbb.notice_view(t("kbform.check_failed", lang), lang=lang))

