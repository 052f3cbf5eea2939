"""What keeps the LLM step from slowing the bot down: a circuit breaker that stops calling a failing
server for a while, and a cache of earlier LLM explanations."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Literal

from bot.models import Explanation


class CircuitBreaker:
    """closed → (N consecutive failures) → open → (cool-down passed) → half-open: one trial request;
    its success closes the circuit, its failure opens it again for another cool-down."""

    def __init__(self, failures: int = 3, cooldown_s: float = 30.0, clock: Any = time.monotonic):
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False
        self.last_reason = ""

    @property
    def state(self) -> Literal["closed", "open", "half-open"]:
        with self._lock:
            return self._state()

    def _state(self) -> Literal["closed", "open", "half-open"]:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.cooldown_s:
            return "half-open"
        return "open"

    def allow(self) -> bool:
        with self._lock:
            state = self._state()
            if state == "closed":
                return True
            if state == "half-open" and not self._trial_in_flight:
                self._trial_in_flight = True
                return True
            return False

    def retry_in_s(self) -> float:
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_s - (float(self._clock()) - self._opened_at))

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_in_flight = False

    def failure(self, reason: str) -> None:
        with self._lock:
            self._failures += 1
            self.last_reason = reason
            if self._trial_in_flight or self._failures >= self.threshold:
                self._opened_at = self._clock()
            self._trial_in_flight = False

    def release(self) -> None:
        """The trial ended without telling anything about the server (e.g. our prompt did not fit)."""
        with self._lock:
            self._trial_in_flight = False


class AnswerCache:
    """In-memory LRU of LLM explanations keyed by (model, prompt hash). Thread-safe."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[tuple[str, str], Explanation] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str]) -> Explanation | None:
        if self.size <= 0:
            return None
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: tuple[str, str], value: Explanation) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
