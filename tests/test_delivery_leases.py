"""Slack deliveries as leases (issue 28) on SQLite and a real PostgreSQL, with an injected clock: a
delivery is taken by one replica; a live lease refuses a retry elsewhere ("busy"); an expired or
handed-back lease is taken over with the placeholder of the replica that had it; a finished one is
never taken again; the heartbeat keeps a slow replica's lease; while the database is unreachable a
replica answers from its own view, once, and writes that claim when the database is back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bot.slack.seen_events import SeenEvents
from bot.slack.store import Lease, SlackStateDB
from bot.storage import StorageError


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Clock], SlackStateDB]:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return lambda clock: SlackStateDB(url, retention_s=86400, clock=clock)
    return lambda clock: SlackStateDB(tmp_path / "state.sqlite3", retention_s=86400, clock=clock)


def test_a_lease_is_exclusive_until_it_runs_out_then_taken_over_with_the_placeholder(
        state: Callable[[Clock], SlackStateDB]) -> None:
    clock = Clock()
    a, b = state(clock), state(clock)
    assert a.take("event:Ev1", "A", lease_s=30).outcome == "new"
    assert a.note_placeholder("event:Ev1", "A", "D0DM", "1700000000.000100")
    assert b.take("event:Ev1", "B", lease_s=30).outcome == "busy"
    assert a.take("event:Ev1", "A", lease_s=30).outcome == "done"  # its own repeat: never a second answer
    clock.now += 29
    assert b.take("event:Ev1", "B", lease_s=30).outcome == "busy"
    clock.now += 2  # A died: no heartbeat, the lease ran out
    taken = b.take("event:Ev1", "B", lease_s=30)
    assert taken == Lease("retaken", 2, "D0DM", "1700000000.000100")
    assert not a.finish("event:Ev1", "A")  # A's late finish does not count: B holds it
    assert b.finish("event:Ev1", "B")
    clock.now += 3600
    assert a.take("event:Ev1", "A", lease_s=30).outcome == "done"  # answered: never again


def test_renewed_leases_hold_and_released_ones_are_taken_at_once(state: Callable[[Clock], SlackStateDB]) -> None:
    clock = Clock()
    a, b = state(clock), state(clock)
    for key in ("event:Ev1", "event:Ev2"):
        assert a.take(key, "A", lease_s=30).outcome == "new"
    clock.now += 20
    assert a.renew(["event:Ev1", "event:Ev2"], "A", lease_s=30) == 2
    clock.now += 20  # 40 s after the take, 20 after the heartbeat
    assert b.take("event:Ev1", "B", lease_s=30).outcome == "busy"
    assert a.release("event:Ev2", "A")  # SIGTERM: handed back
    assert b.take("event:Ev2", "B", lease_s=30).outcome == "retaken"
    assert a.renew(["event:Ev2"], "A", lease_s=30) == 0  # no longer A's


class FlakyStore:
    """A lease store whose database can be switched off (unit test of SeenEvents' plumbing)."""

    def __init__(self, inner: SlackStateDB) -> None:
        self.inner, self.down = inner, False

    def _check(self) -> None:
        if self.down:
            raise StorageError("connection refused")

    def take(self, key: str, owner: str, lease_s: float) -> Lease:
        self._check()
        return self.inner.take(key, owner, lease_s)

    def renew(self, keys: Sequence[str], owner: str, lease_s: float) -> int:
        self._check()
        return self.inner.renew(keys, owner, lease_s)

    def finish(self, key: str, owner: str) -> bool:
        self._check()
        return self.inner.finish(key, owner)

    def release(self, key: str, owner: str) -> bool:
        self._check()
        return self.inner.release(key, owner)

    def note_placeholder(self, key: str, owner: str, channel: str, message_ts: str) -> bool:
        self._check()
        return self.inner.note_placeholder(key, owner, channel, message_ts)


def test_while_the_database_is_down_a_replica_answers_once_from_its_own_view(
        state: Callable[[Clock], SlackStateDB]) -> None:
    clock = Clock()
    store_a = FlakyStore(state(clock))
    a = SeenEvents(store=store_a, owner="A", lease_s=30, clock=clock)
    b = SeenEvents(store=state(clock), owner="B", lease_s=30, clock=clock)
    store_a.down = True
    assert a.admit("event:Ev1").outcome == "offline"
    assert a.admit("event:Ev1", retry=True).outcome == "duplicate"  # never twice from A's view
    a.finish("event:Ev1")
    assert a.admit("event:Ev2").outcome == "offline"  # still working on it when the database returns
    store_a.down = False
    a.heartbeat()  # writes both offline claims: B now sees them
    assert b.admit("event:Ev1", retry=True).outcome == "duplicate"
    assert b.admit("event:Ev2", retry=True).outcome == "busy"
    a.finish("event:Ev2")
    assert b.admit("event:Ev2", retry=True).outcome == "duplicate"


def test_shutdown_hands_back_what_is_unanswered(state: Callable[[Clock], SlackStateDB]) -> None:
    clock = Clock()
    a = SeenEvents(store=state(clock), owner="A", lease_s=30, clock=clock)
    b = SeenEvents(store=state(clock), owner="B", lease_s=30, clock=clock)
    assert a.admit("event:Ev1").outcome == "new" and a.admit("event:Ev2").outcome == "new"
    a.finish("event:Ev1")
    assert [h.key for h in a.hand_back()] == ["event:Ev2"]
    assert b.admit("event:Ev1", retry=True).outcome == "duplicate"
    assert b.admit("event:Ev2", retry=True).outcome == "retaken"
    assert b.admit("event:Ev3").outcome == "new" and b.admit("event:Ev3").outcome == "duplicate"


def test_a_delivery_is_done_when_its_last_job_ends_and_a_cancelled_job_leaves_it_to_hand_back() -> None:
    """bot/slack/delivery.py: the listener and the worker jobs it submits count as the delivery's work
    (followed by a context variable); done after the last of them; a job cancelled at shutdown never
    runs, so its delivery is still unanswered and is handed back."""
    import threading

    from bot.slack.delivery import CURRENT, Delivery, TrackingExecutor

    seen = SeenEvents()
    gate, started = threading.Event(), threading.Event()
    pool = TrackingExecutor(max_workers=1)

    def slow() -> None:
        started.set()
        gate.wait(60)

    try:
        for key, job in (("event:Ev1", slow), ("event:Ev2", lambda: None)):
            CURRENT.set(Delivery(key, seen, seen.admit(key)))
            pool.submit(job)  # what a listener does with slow work
            assert started.wait(60)  # Ev1's job runs; Ev2's waits behind it
        CURRENT.set(None)
        assert sorted(seen.working()) == ["event:Ev1", "event:Ev2"]  # Ev2's job is queued behind Ev1's
        pool.shutdown(wait=False, cancel_futures=True)  # SIGTERM: Ev2's job never runs
        gate.set()
        pool.shutdown(wait=True)
        assert seen.working() == ["event:Ev2"]
        assert [h.key for h in seen.hand_back()] == ["event:Ev2"] and seen.working() == []
    finally:
        gate.set()
        pool.shutdown(wait=True)
