"""The host picker modal was submitted: validate the target in the ack (errors show on the field),
then run the checks and post them in the answer's thread."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from bot.present.i18n import t
from bot.slack.conversation import Where
from bot.slack.deps import SlackDeps
from bot.slack.hosts import start_host_diagnosis
from bot.slack.reply import hosts as picker


def host_picker_submitted(deps: SlackDeps) -> Callable[..., None]:
    def on_host_picker(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        values = view["state"]["values"]
        target = ((values.get(picker.HOST_PICKER_BLOCK) or {}).get(picker.HOST_PICKER_INPUT) or {}).get("value") or ""
        words = target.split()
        user = (body.get("user") or {}).get("id")
        lang = deps.locales.language_of(client, user) or "en"
        if deps.hosts is None:
            ack(response_action="errors", errors={picker.HOST_PICKER_BLOCK: t("slack.host.not_configured", lang)[:150]})
            return
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
        except ValueError:
            meta = {}
        channel = meta.get("channel") or user
        problem = deps.hosts.check_target(client, user, channel, words[0]) if words else t("slack.picker.empty", lang)
        if problem:
            ack(response_action="errors", errors={picker.HOST_PICKER_BLOCK: problem})
            return
        ack()
        # a view_submission always names its user, so `channel` is a str here
        where = Where(channel=cast(str, channel), user=user, thread_ts=meta.get("thread_ts"))
        checks = [str(c) for c in meta.get("checks") or [] if isinstance(c, str)]  # the answer's component checks
        start_host_diagnosis(deps, client, where, words[0], words[1:] or checks)

    return on_host_picker
