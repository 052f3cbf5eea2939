""""Fixed it" / "Didn't help" (buttons on every answer): one vote per user and answer, recorded by
bot.kb_growth against the matched case; the thanks (with the case's outcome so far) is ephemeral."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.kb_growth import KBGrowth
from bot.present.i18n import t
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import language_of, user_of
from bot.slack.reply import kb_growth as kbb

log = logging.getLogger(__name__)


def answer_feedback(deps: SlackDeps, growth: KBGrowth, value: str) -> Callable[..., None]:
    def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any, client: Any) -> None:
        ack()
        user_id, _ = user_of(body)
        lang = language_of(deps, client, user_id)
        answer_id = str(action.get("value") or "")
        record = deps.recent.record_feedback(answer_id, user_id, value)  # type: ignore[arg-type]
        if record is None:
            said = t("kbform.said_fixed" if value == "fixed" else "kbform.said_not_helpful", lang)
            message = kbb.ephemeral(t("kbform.too_old", lang, said=said), ":pray:")
            respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            return
        channel = record.channel_id or (body.get("channel") or {}).get("id", "")
        result = growth.vote(
            answer_id=answer_id, user_id=user_id, value=value,  # type: ignore[arg-type]
            case_id=record.case_id, verdict=record.verdict, channel=channel, evidence=record.evidence,
        )
        log.info("feedback answer=%s case=%s user=%s value=%s", answer_id, record.case_id, user_id, value)
        outcome = result.outcome.text() if result.outcome else None
        message = kbb.feedback_thanks(value=value, case_id=record.case_id, outcome=outcome, changed_from=result.previous,
                                      lang=lang)
        respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)

    return on_feedback

