"""Events API listeners (acked by bolt before they run; slow work goes to deps.workers)."""

from __future__ import annotations

from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.events.app_home_opened import app_home_opened
from bot.slack.events.app_mention import app_mention
from bot.slack.events.message import message

# Events the listeners need; slack-manifest.yaml subscribes to these (message.* deliver "message").
EVENTS = ("app_mention", "message", "app_home_opened")


def register(app: Any, deps: SlackDeps) -> None:
    app.event("app_mention")(app_mention(deps))
    app.event("message")(message(deps))
    app.event("app_home_opened")(app_home_opened(deps))
