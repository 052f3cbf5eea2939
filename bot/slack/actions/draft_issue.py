""""Draft a vLLM issue": a Markdown bug-report draft as a file in the answer's thread. The answer's stored
evidence (already redacted) is matched again to rebuild the excerpt and the KB's suggestions; the draft is
only posted in the thread, never sent anywhere else. Work runs on the worker pool after the ack."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.present.i18n import Language, t
from bot.slack.deps import SlackDeps

log = logging.getLogger(__name__)


def draft_issue(deps: SlackDeps) -> Callable[..., None]:
    def on_draft_issue(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        user = (body.get("user") or {}).get("id")
        lang = deps.locales.language_of(client, user) or "en"
        record = deps.recent.get(str(action.get("value") or ""))
        if record is None or not record.evidence:
            respond(text=t("draft.expired", lang), response_type="ephemeral", replace_original=False)
            return
        deps.workers.submit(lambda: _post_draft(deps, client, record, lang))

    return on_draft_issue


def _post_draft(deps: SlackDeps, client: Any, record: Any, lang: Language) -> None:
    from bot.slack import attachments

    try:
        diagnosis = deps.pipeline.match(record.evidence)
        text = attachments.draft_text(diagnosis, attachments.feedback_of(deps.kb_growth, diagnosis))
        client.files_upload_v2(channel=record.channel_id, thread_ts=record.thread_ts,
                               filename=f"vllm-issue-draft-{record.answer_id}.md", title=t("draft.posted", lang),
                               content=text)
    except Exception:  # noqa: BLE001 - best effort; the answer itself is untouched
        log.exception("could not post the issue draft for %s", record.answer_id)
