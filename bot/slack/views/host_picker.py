"""The host picker modal was submitted: validate the target in the ack (errors show on the field),
then run the checks and post them in the answer's thread."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.slack.conversation import Where
from bot.slack.deps import SlackDeps
from bot.slack.hosts import NOT_CONFIGURED, start_host_diagnosis
from bot.slack.reply import hosts as blocks


def host_picker_submitted(deps: SlackDeps) -> Callable[..., None]:
    def on_host_picker(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        values = view["state"]["values"]
        target = ((values.get(blocks.HOST_PICKER_BLOCK) or {}).get(blocks.HOST_PICKER_INPUT) or {}).get("value") or ""
        words = target.split()
        if deps.hosts is None:
            ack(response_action="errors", errors={blocks.HOST_PICKER_BLOCK: NOT_CONFIGURED[:150]})
            return
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
        except ValueError:
            meta = {}
        user = (body.get("user") or {}).get("id")
        channel = meta.get("channel") or user
        problem = deps.hosts.check_target(client, user, channel, words[0]) if words else "Type a host or group name."
        if problem:
            ack(response_action="errors", errors={blocks.HOST_PICKER_BLOCK: problem})
            return
        ack()
        where = Where(channel=channel, user=user, thread_ts=meta.get("thread_ts"))
        start_host_diagnosis(deps, client, where, words[0], words[1:])

    return on_host_picker
