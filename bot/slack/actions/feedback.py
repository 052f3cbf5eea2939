""""Fixed it" / "Didn't help": thanked at once and remembered with the answer (Home tab, logs).

Durable feedback that re-ranks KB cases needs the KB store (another issue); until then the thanks says
what the feedback will be used for, and the log line keeps it for the admins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.slack import blocks
from bot.slack.deps import SlackDeps
from bot.slack.recent import Feedback

log = logging.getLogger(__name__)


def feedback(deps: SlackDeps, value: Feedback) -> Callable[..., None]:
    def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        ack()
        user = (body.get("user") or {}).get("id", "")
        record = deps.recent.record_feedback(action.get("value", ""), user, value)
        case_id = record.case_id if record else None
        log.info("feedback answer=%s case=%s user=%s value=%s", action.get("value"), case_id, user, value)
        what = f"KB case `{case_id}`" if case_id else "this answer"
        if value == "fixed":
            text = (
                f"Thanks! Noted that {what} fixed it. Once the team's feedback store is switched on, "
                "answers like this will rank the case higher for the next person."
            )
        else:
            text = (
                f"Thanks for telling me {what} did not help. If you find the real cause, *Add as a KB case* "
                "will turn it into an answer for the next person."
            )
        message = blocks.notice(text, ":pray:")
        respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)

    return on_feedback
