"""What the bot remembers about the answers it gave: for buttons, feedback and the App Home tab.

In memory and bounded: a restart forgets, which only costs the Home tab its history and makes old
buttons answer "this answer has expired". Durable feedback belongs to the KB store (another issue).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Literal

Feedback = Literal["fixed", "not_helpful"]


@dataclass(frozen=True)
class AnswerRecord:
    answer_id: str
    user_id: str | None
    channel_id: str
    thread_ts: str | None  # thread the answer lives in (None: only reachable through response_url)
    message_ts: str | None  # the answer message itself
    verdict: str
    case_id: str | None
    title: str | None
    evidence: str  # distilled evidence lines, for "Add as a KB case"
    created: float = field(default_factory=time.time)
    feedback: dict[str, Feedback] = field(default_factory=dict)  # user id → last feedback


class RecentAnswers:
    """Thread-safe LRU of the last `capacity` answers, newest last."""

    def __init__(self, capacity: int = 500) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, AnswerRecord] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(6)

    def add(self, record: AnswerRecord) -> None:
        with self._lock:
            self._items[record.answer_id] = record
            self._items.move_to_end(record.answer_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def get(self, answer_id: str) -> AnswerRecord | None:
        with self._lock:
            return self._items.get(answer_id)

    def record_feedback(self, answer_id: str, user_id: str, feedback: Feedback) -> AnswerRecord | None:
        with self._lock:
            record = self._items.get(answer_id)
            if record is None:
                return None
            updated = replace(record, feedback={**record.feedback, user_id: feedback})
            self._items[answer_id] = updated
            return updated

    def for_user(self, user_id: str, limit: int = 10) -> list[AnswerRecord]:
        """The user's own answers, newest first (other people's DMs are not shown to them)."""
        with self._lock:
            mine = [r for r in self._items.values() if r.user_id == user_id]
        return list(reversed(mine))[:limit]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
