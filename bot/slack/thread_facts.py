"""The last host diagnosis of each Slack thread, so a log pasted there later is explained with what the
checks found on the host (issue 5: "a pasted log in a thread that already has a diagnosis uses those
facts").

Kept in a bounded in-memory LRU and, when a store is given (bot/slack/store.py), in SQLite, so a restart
does not forget it. Facts older than MAX_AGE_S are not used: a host changes, and an old check result in
the prompt would mislead the explanation more than help it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bot.diagnosis.versions import report_gpus, report_versions
from bot.slack.lru import BoundedLRU

MAX_AGE_S = 24 * 3600


@dataclass(frozen=True)
class ThreadHostFacts:
    channel_id: str
    thread_ts: str
    target: str  # what was diagnosed: a host or a group name
    hosts: tuple[str, ...]  # the hosts that could be checked
    facts: tuple[str, ...]  # redacted lines from FleetReport.facts_for_prompt(), failures first
    created: float = field(default_factory=time.time)
    # package → version the checks found (bot/diagnosis/versions.py), read against a pasted log's cases' fixed_in;
    # for a group, only the versions every checked host agrees on
    versions: dict[str, str] = field(default_factory=dict)
    gpus: int | None = None  # GPUs the one checked host counted: fills {tp_fit} when the log does not say

    @classmethod
    def from_report(cls, channel_id: str, thread_ts: str, report: Any) -> ThreadHostFacts | None:
        """None when no host could be checked (an unreachable host says nothing about a log)."""
        checked = [h.host for h in report.hosts if not h.error]
        if not checked:
            return None
        facts = report.facts_for_prompt(checked[0] if len(checked) == 1 else None).splitlines()
        return cls(channel_id, thread_ts, report.target, tuple(checked), tuple(facts),
                   versions=report_versions(report), gpus=report_gpus(report))

    @property
    def label(self) -> str:
        """`gpu-01`, or `fleet (3 hosts)` for a group."""
        if len(self.hosts) == 1:
            return self.hosts[0]
        return f"{self.target} ({len(self.hosts)} hosts)"


class ThreadFacts:
    """Thread-safe LRU of the last `capacity` thread diagnoses, backed by an optional store."""

    def __init__(self, capacity: int = 1000, store: Any | None = None, clock: Any = time.time) -> None:
        self._store = store
        self._clock = clock
        self._items: BoundedLRU[tuple[str, str], ThreadHostFacts] = BoundedLRU(capacity)

    def remember(self, facts: ThreadHostFacts) -> None:
        self._items.put((facts.channel_id, facts.thread_ts), facts)
        if self._store is not None:
            self._store.save_thread_facts(facts)

    def lookup(self, channel_id: str, thread_ts: str | None) -> ThreadHostFacts | None:
        """The thread's latest host diagnosis, if it is recent enough to trust."""
        if not thread_ts:
            return None
        key = (channel_id, thread_ts)
        found = self._items.get(key)
        if found is None and self._store is not None:
            found = self._store.load_thread_facts(channel_id, thread_ts)
            if found is not None:
                self._items.put(key, found, overwrite=False)  # a newer one remembered meanwhile wins
        if found is None or self._clock() - found.created > MAX_AGE_S:
            return None
        return found
