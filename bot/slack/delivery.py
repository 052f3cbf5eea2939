"""The Slack delivery being served, followed from the ack into bolt's listener thread and the bot's
workers (a context variable, copied by the executors like the request id): when the last piece of work
it started ends, its claim is marked done (bot/slack/seen_events.py); a conversation that takes over a
delivery from a replica that died edits that replica's placeholder instead of posting a new one.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bot.ops.logs import ContextExecutor
from bot.slack.seen_events import Admitted, SeenEvents

log = logging.getLogger(__name__)


class Delivery:
    def __init__(self, key: str, seen: SeenEvents, admitted: Admitted) -> None:
        self.key = key
        self._seen = seen
        self.admitted = admitted
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def placeholder(self) -> tuple[str, str] | None:
        """(channel, ts) of the message an earlier holder of this delivery posted, when taken over."""
        a = self.admitted
        return (a.channel, a.message_ts) if a.channel and a.message_ts else None

    def note_placeholder(self, channel: str, ts: str, lang: str = "en") -> None:
        try:
            self._seen.note_placeholder(self.key, channel, ts, lang)
        except Exception:  # noqa: BLE001 - bookkeeping: a failure costs only the take-over's edit
            log.warning("could not record the placeholder of %s", self.key, exc_info=True)

    def hold(self) -> None:
        with self._lock:
            self._pending += 1

    def release(self) -> None:
        with self._lock:
            self._pending -= 1
            finished = self._pending == 0
        if finished:
            self._seen.finish(self.key)


CURRENT: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar("slack_delivery", default=None)


def current() -> Delivery | None:
    return CURRENT.get()


class TrackingExecutor(ContextExecutor):
    """A ContextExecutor whose jobs count as work of the delivery they were submitted for; a job that is
    cancelled before it runs (shutdown) leaves its delivery unfinished, to be handed back."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        delivery = CURRENT.get()
        if delivery is None:
            return super().submit(fn, *args, **kwargs)
        delivery.hold()

        def tracked(*a: Any, **kw: Any) -> Any:
            try:
                return fn(*a, **kw)
            finally:
                delivery.release()

        return super().submit(tracked, *args, **kwargs)
