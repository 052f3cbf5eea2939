"""What the bot remembers about the answers it gave: for buttons, feedback and the App Home tab.

A bounded in-memory LRU in front of an optional store (bot/slack/store.py, SQLite): with the store, the
buttons of an answer keep working after a restart until the retention ends (VLLM_DOCTOR_SLACK_STATE_*);
without it (unit tests) a restart forgets, and old buttons say the answer has expired. Votes that rank
KB cases live in the KB store (bot/kb_growth); `feedback` here only marks the Home tab.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Literal

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
    """Thread-safe LRU of the last `capacity` answers, newest last, backed by an optional store."""

    def __init__(self, capacity: int = 500, store: Any | None = None) -> None:
        self._capacity = capacity
        self._store = store
        self._items: OrderedDict[str, AnswerRecord] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(6)

    def add(self, record: AnswerRecord) -> None:
        self._put(record)
        if self._store is not None:
            self._store.save_answer(record)

    def get(self, answer_id: str) -> AnswerRecord | None:
        with self._lock:
            record = self._items.get(answer_id)
        if record is None and self._store is not None and answer_id:
            record = self._store.load_answer(answer_id)  # an answer from before a restart, or evicted
            if record is not None:
                self._put(record, overwrite=False)
                with self._lock:
                    record = self._items.get(answer_id, record)
        return record

    def record_feedback(self, answer_id: str, user_id: str, feedback: Feedback) -> AnswerRecord | None:
        record = self.get(answer_id)
        if record is None:
            return None
        with self._lock:
            current = self._items.get(answer_id, record)
            updated = replace(current, feedback={**current.feedback, user_id: feedback})
            if answer_id in self._items:
                self._items[answer_id] = updated
        if self._store is not None:
            self._store.save_feedback(answer_id, user_id, feedback)
        return updated

    def for_user(self, user_id: str, limit: int = 10) -> list[AnswerRecord]:
        """The user's own answers, newest first (other people's DMs are not shown to them)."""
        with self._lock:
            mine = {r.answer_id: r for r in self._items.values() if r.user_id == user_id}
        if self._store is not None:
            for record in self._store.answers_for_user(user_id, limit):
                mine.setdefault(record.answer_id, record)  # memory has the latest feedback
        return sorted(mine.values(), key=lambda r: r.created, reverse=True)[:limit]

    def _put(self, record: AnswerRecord, overwrite: bool = True) -> None:
        with self._lock:
            if not overwrite and record.answer_id in self._items:
                return
            self._items[record.answer_id] = record
            self._items.move_to_end(record.answer_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
