"""Slack re-sends an event when it saw no 2xx within 3 s (X-Slack-Retry-Num, or Socket Mode's
retry_attempt); the retry carries the same event_id, and with several replicas it may reach another
one. Remember recent ids here (a repeat on this replica costs no database round trip) and, when a
claim function is given (bot/slack/store.py: a unique key in the shared database), let the database
decide which replica answers: exactly one does.

Without a shared database a restarted bot has an empty memory and will answer a retry of an event it
never finished; that is the right trade (an answer twice beats no answer).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class SeenEvents:
    def __init__(self, ttl_s: float = 3600.0, capacity: int = 10_000,
                 claim: Callable[[str], bool] | None = None) -> None:
        self._ttl = ttl_s
        self._capacity = capacity
        self._claim = claim
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, event_id: str, now: float | None = None) -> bool:
        """True exactly once per `event_id` (across replicas when a claim function is set)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._seen:
                oldest_id, seen_at = next(iter(self._seen.items()))
                if now - seen_at <= self._ttl and len(self._seen) < self._capacity:
                    break
                del self._seen[oldest_id]
            if event_id in self._seen:
                return False
            self._seen[event_id] = now
        return self._claim is None or self._claim(event_id)
