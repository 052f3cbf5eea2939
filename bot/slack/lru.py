"""A thread-safe bounded LRU map: what the Slack state caches in memory in front of the shared store
(bot/slack/thread_facts.py, bot/slack/healthy_runs.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: K, value: V, *, overwrite: bool = True) -> None:
        """Keep `value` as the newest; with overwrite=False a value kept meanwhile wins (a store read racing a
        newer remember)."""
        with self._lock:
            if not overwrite and key in self._items:
                return
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


__all__ = ["BoundedLRU"]
