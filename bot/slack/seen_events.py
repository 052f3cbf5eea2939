"""Slack re-sends an event when it saw no 2xx within 3 s (X-Slack-Retry-Num, or Socket Mode's
retry_attempt); the retry carries the same event_id, and with several replicas it may reach another
one. Remember recent ids here (a repeat on this replica costs no database round trip) and, when a lease
store is given (bot/slack/store.py: a unique key in the shared database), let the database decide which
replica answers.

A claim is a lease (issue 28): the replica that takes a delivery holds it for `lease_s` seconds, renewed
by `heartbeat()` while the work runs, marked done when the answer is out (`finish`), handed back at
shutdown (`release`). A replica that dies (SIGKILL, node loss) stops renewing; once its lease ran out the
next delivery of the event (Slack's retry) is taken over by another replica, which edits the dead one's
placeholder instead of posting a second message. While the lease is still live a *retry* is refused with
"busy": the edge answers it with a 503, so Slack tries again later instead of forgetting the event.

While the database is unreachable a delivery is answered from this replica's own view ("offline"): once
here, never twice here; another replica that gets a retry in that window may answer it too
(docs/scale-out.md). Offline claims are written to the database when it answers again.

Without a shared database a restarted bot has an empty memory and will answer a retry of an event it
never finished; that is the right trade (an answer twice beats no answer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.ops import metrics
from bot.storage import StorageError

log = logging.getLogger(__name__)

Admission = Literal["new", "retaken", "offline", "duplicate", "busy"]
ANSWER: frozenset[Admission] = frozenset({"new", "retaken", "offline"})


class LeaseRecord(Protocol):
    @property
    def outcome(self) -> str: ...

    @property
    def channel(self) -> str | None: ...

    @property
    def message_ts(self) -> str | None: ...


class LeaseStore(Protocol):
    """bot/slack/store.py SlackStateDB: the shared claims table."""

    def take(self, key: str, owner: str, lease_s: float) -> LeaseRecord: ...

    def renew(self, keys: Sequence[str], owner: str, lease_s: float) -> int: ...

    def finish(self, key: str, owner: str) -> bool: ...

    def release(self, key: str, owner: str) -> bool: ...

    def note_placeholder(self, key: str, owner: str, channel: str, message_ts: str) -> bool: ...


@dataclass(frozen=True)
class Admitted:
    """What the edge does with a delivery, and (taken over) where the earlier holder's placeholder is."""

    outcome: Admission
    channel: str | None = None
    message_ts: str | None = None

    @property
    def answer(self) -> bool:
        return self.outcome in ANSWER


@dataclass
class _Local:
    at: float
    state: Literal["working", "done"]
    offline: bool = False  # taken while the database was unreachable: not yet written there
    placeholder: tuple[str, str, str] | None = None  # channel, ts, language of the message being answered


@dataclass(frozen=True)
class HandedBack:
    key: str
    placeholder: tuple[str, str, str] | None  # channel, ts, language: the edge tells the asker


class SeenEvents:
    def __init__(self, ttl_s: float = 3600.0, capacity: int = 10_000, claim: Callable[[str], bool] | None = None,
                 *, store: LeaseStore | None = None, owner: str = "", lease_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._capacity = capacity
        self._claim = claim
        self._store = store
        self.owner = owner
        self.lease_s = lease_s
        self._clock = clock
        self._seen: OrderedDict[str, _Local] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- admission -------------------------------------------------------------------------------------------
    def first_time(self, event_id: str, now: float | None = None, *, retry: bool = False) -> bool:
        """True when this replica should answer `event_id` (once per event across replicas with a store)."""
        return self.admit(event_id, now, retry=retry).answer

    def admit(self, key: str, now: float | None = None, *, retry: bool = False) -> Admitted:
        now = self._clock() if now is None else now
        with self._lock:
            self._evict(now)
            if key in self._seen:
                metrics.CLAIMS.labels(outcome="duplicate").inc()
                return Admitted("duplicate")
            if self._store is None:
                self._seen[key] = _Local(now, "working")
                if self._claim is not None and not self._claim(key):
                    metrics.CLAIMS.labels(outcome="duplicate").inc()
                    return Admitted("duplicate")
                metrics.CLAIMS.labels(outcome="new").inc()
                return Admitted("new")
        try:
            lease = self._store.take(key, self.owner, self.lease_s)
        except StorageError as exc:
            metrics.DATABASE_ERRORS.labels(operation="claim").inc()
            with self._lock:
                if key in self._seen:
                    return Admitted("duplicate")
                self._seen[key] = _Local(now, "working", offline=True)
            log.warning("could not claim %s (database unreachable: %s); answering it from this replica's view", key,
                        exc)
            metrics.CLAIMS.labels(outcome="offline").inc()
            return Admitted("offline")
        outcome = lease.outcome
        if outcome == "busy" and not retry:
            outcome = "done"  # the same delivery at two replicas at once: the other one answers it
        if outcome in ("new", "retaken"):
            with self._lock:
                if key in self._seen:  # two threads of this replica raced on the same key
                    return Admitted("duplicate")
                self._seen[key] = _Local(now, "working")
        metrics.CLAIMS.labels(outcome={"done": "duplicate"}.get(outcome, outcome)).inc()
        if outcome == "retaken":
            log.warning("took over %s: the replica that had it did not finish it (lease ran out or handed back)",
                        key)
            return Admitted("retaken", lease.channel, lease.message_ts)
        return Admitted("duplicate" if outcome == "done" else outcome)  # type: ignore[arg-type]

    def _evict(self, now: float) -> None:
        while self._seen:
            oldest_id, entry = next(iter(self._seen.items()))
            if now - entry.at <= self._ttl and len(self._seen) < self._capacity:
                break
            del self._seen[oldest_id]

    # --- the life of a taken delivery --------------------------------------------------------------------------
    def note_placeholder(self, key: str, channel: str, message_ts: str, lang: str = "en") -> None:
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None:
                entry.placeholder = (channel, message_ts, lang)
        if self._store is not None:
            self._store.note_placeholder(key, self.owner, channel, message_ts)

    def finish(self, key: str) -> None:
        """The delivery was answered (or needed no answer)."""
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or entry.state == "done":
                return
            entry.state = "done"
            offline = entry.offline
        if self._store is None or offline:
            return  # an offline claim is written (done) by the heartbeat once the database answers
        try:
            self._store.finish(key, self.owner)
        except StorageError as exc:
            metrics.DATABASE_ERRORS.labels(operation="finish").inc()
            log.warning("could not mark %s answered: %s (written by the next heartbeat)", key, exc)
            with self._lock:
                entry.offline = True

    def working(self) -> list[str]:
        with self._lock:
            return [k for k, e in self._seen.items() if e.state == "working"]

    def hand_back(self) -> list[HandedBack]:
        """Shutdown: release every delivery not answered yet; another replica takes each at its next
        delivery. Returns them, with the placeholder each had posted (the edge says what happened there)."""
        with self._lock:
            left = [HandedBack(k, e.placeholder) for k, e in self._seen.items() if e.state == "working"]
        for item in left:
            if self._store is not None:
                try:
                    self._store.release(item.key, self.owner)
                except StorageError as exc:
                    metrics.DATABASE_ERRORS.labels(operation="release").inc()
                    log.warning("could not hand back %s (its lease runs out in %.0f s instead): %s", item.key,
                                self.lease_s, exc)
            with self._lock:
                self._seen.pop(item.key, None)
        if left:
            metrics.HANDED_BACK.inc(len(left))
            log.warning("handed back %d unanswered deliveries: %s", len(left), ", ".join(i.key for i in left[:20]))
        return left

    # --- heartbeat ---------------------------------------------------------------------------------------------
    def heartbeat(self) -> None:
        """Renew the leases of the work in progress; write the claims taken while the database was down."""
        if self._store is None:
            return
        with self._lock:
            offline = [(k, e.state) for k, e in self._seen.items() if e.offline]
            live = [k for k, e in self._seen.items() if e.state == "working" and not e.offline]
        try:
            for key, state in offline:
                lease = self._store.take(key, self.owner, self.lease_s)
                if lease.outcome in ("new", "retaken") and state == "done":
                    self._store.finish(key, self.owner)
                with self._lock:
                    entry = self._seen.get(key)
                    if entry is not None:
                        entry.offline = False
            self._store.renew(live, self.owner, self.lease_s)
        except StorageError as exc:
            metrics.DATABASE_ERRORS.labels(operation="heartbeat").inc()
            log.warning("lease heartbeat: %s", exc)

    def start(self) -> SeenEvents:
        if self._store is not None and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
            self._thread.start()
        return self

    def alive(self) -> tuple[bool, str]:
        """Liveness: a replica whose heartbeat thread died would keep leases it no longer renews."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "the delivery-lease heartbeat stopped"
        return True, "alive"

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.heartbeat()
            except Exception:  # noqa: BLE001 - a bug here must not end the heartbeat (liveness watches it)
                log.exception("lease heartbeat failed")
