"""Healthy start-up logs pasted in a channel, kept per (channel, model), so a failing log of the same model
pasted there later is answered with what changed since the working run (issue 25 item 6; the CLI's
`explain LOG --since GOOD.log`, bot/diagnosis/since.py).

Only the redacted lines the facts were read from are kept (line number and text), and the facts are read
again from them, so what is stored is what `--since` would have read. Kept in a bounded in-memory LRU and,
when a store is given (bot/slack/store.py), in the shared database, so another replica or a restart finds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.models import LogFacts
from bot.slack.lru import BoundedLRU

MAX_AGE_S = 30 * 24 * 3600  # a month-old run still says what worked; older ones describe another deployment
MAX_LINES = 400  # the facts of a start-up log come from a few dozen lines
MAX_LINE_CHARS = 8000  # the engine-config line is long; a fact near its end must survive


@dataclass(frozen=True)
class HealthyRun:
    channel_id: str
    model: str
    lines: tuple[tuple[int, str], ...]  # (line number, redacted line) of every line a fact was read from
    created: float = field(default_factory=time.time)

    @classmethod
    def from_log(cls, channel_id: str, text: str, facts: LogFacts, created: float) -> HealthyRun | None:
        """`text`: the redacted paste the facts were read from."""
        if not facts.model or not facts.sources:
            return None
        pasted = text.splitlines()
        numbers = sorted({n for n in facts.sources.values() if 0 < n <= len(pasted)})[:MAX_LINES]
        return cls(channel_id, facts.model, tuple((n, pasted[n - 1][:MAX_LINE_CHARS]) for n in numbers), created)

    def text(self) -> str:
        """The kept lines at their own line numbers (blank lines between), so sources cite the pasted log."""
        out: list[str] = []
        for number, text in self.lines:
            out.extend([""] * max(0, number - 1 - len(out)))
            out.append(text)
        return "\n".join(out)


class HealthyRuns:
    """Thread-safe LRU of the latest healthy run per (channel, model), backed by an optional store."""

    def __init__(
        self, capacity: int = 500, store: object | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._clock = clock
        self._items: BoundedLRU[tuple[str, str], HealthyRun] = BoundedLRU(capacity)

    def remember(self, channel_id: str, text: str, facts: LogFacts) -> HealthyRun | None:
        run = HealthyRun.from_log(channel_id, text, facts, self._clock())
        if run is None:
            return None
        self._items.put((channel_id, run.model), run)
        save = getattr(self._store, "save_healthy_run", None)
        if save is not None:
            save(run)
        return run

    def lookup(self, channel_id: str, model: str | None) -> HealthyRun | None:
        """The channel's latest healthy run of `model`, if recent enough."""
        if not model:
            return None
        key = (channel_id, model)
        found = self._items.get(key)
        load = getattr(self._store, "load_healthy_run", None)
        if found is None and load is not None:
            found = load(channel_id, model)
            if found is not None:
                self._items.put(key, found, overwrite=False)  # a newer one remembered meanwhile wins
        if found is None or self._clock() - found.created > MAX_AGE_S:
            return None
        return found


__all__ = ["HealthyRun", "HealthyRuns"]
