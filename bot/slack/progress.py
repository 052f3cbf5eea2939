"""Throttled chat.update: the LLM streams tokens far faster than Slack wants edits (chat.update is a
Tier 3 method, ~50 a minute), so intermediate states are sent at most every `interval_s` and the final
state always."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from bot.slack.reply.kit import Message

log = logging.getLogger(__name__)


class ThrottledUpdater:
    def __init__(
        self,
        client: Any,
        channel: str,
        ts: str,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._channel = channel
        self._ts = ts
        self._interval = interval_s
        self._clock = clock
        self._last_sent = clock()  # the message was just posted: wait a full interval before the 1st edit
        self.sent = 0

    def due(self) -> bool:
        return self._clock() - self._last_sent >= self._interval

    def maybe_update(self, build: Callable[[], Message]) -> bool:
        """Send `build()` if an interval has passed since the last edit; intermediate edits that fail
        are logged and skipped (the final one will carry the state)."""
        if not self.due():
            return False
        try:
            self._send(build())
        except Exception as exc:  # noqa: BLE001 - progress is best effort
            log.warning("progress update of %s failed: %s", self._ts, exc)
            return False
        return True

    def final(self, message: Message) -> None:
        self._send(message)

    def _send(self, message: Message) -> None:
        self._client.chat_update(channel=self._channel, ts=self._ts, **message.as_kwargs())
        self._last_sent = self._clock()
        self.sent += 1
