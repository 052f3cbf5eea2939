"""The LLM circuit breaker and answer cache shared by replicas (bot/explain/resilience_shared.py), on SQLite and
a real PostgreSQL: failures seen by different replicas add up, one replica gets the half-open trial, an
explanation cached by one is a hit on the other. Time is a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.explain.explainer import Explanation
from bot.explain.resilience_shared import SharedAnswerCache, SharedCircuitBreaker
from bot.storage import Database, open_database


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "postgresql":
        return open_database(request.getfixturevalue("postgres_url"))
    return open_database(tmp_path / "shared.sqlite3")


def test_failures_on_two_replicas_open_the_circuit_for_both(db: Database) -> None:
    now = [1000.0]
    a, b = (SharedCircuitBreaker(db, failures=3, cooldown_s=30, clock=lambda: now[0]) for _ in range(2))
    assert a.allow() and b.allow() and a.state == "closed"
    a.failure("timeout")
    b.failure("timeout")
    assert a.state == b.state == "closed"
    b.success()  # a success in between resets the count, as in the in-process breaker
    for replica in (a, b, a):
        replica.failure("connection refused")
    assert a.state == b.state == "open" and not a.allow() and not b.allow()
    assert b.last_reason == "connection refused" and b.retry_in_s() == pytest.approx(30)

    now[0] += 31  # half-open: exactly one replica makes the trial call
    assert b.state == "half-open"
    assert [a.allow(), b.allow(), a.allow()] == [True, False, False]
    a.failure("still down")  # the trial failed: open again for everyone, for another cool-down
    assert b.state == "open" and not b.allow()
    now[0] += 31
    assert b.allow() and not a.allow()
    b.success()
    assert a.state == "closed" and a.allow()


def test_a_trial_whose_replica_died_expires(db: Database) -> None:
    now = [0.0]
    a, b = (SharedCircuitBreaker(db, failures=1, cooldown_s=10, clock=lambda: now[0]) for _ in range(2))
    a.failure("down")
    now[0] = 11
    assert a.allow()  # …and replica a is killed before it reports
    assert not b.allow()
    now[0] = 22
    assert b.allow()


def explanation(summary: str) -> Explanation:
    return Explanation(case_id="kv-cache-no-memory", summary=summary, why="because", fix_steps=["a", "b"],
                       confidence="high", language="en", source="llm", model="doctor")


def test_an_answer_cached_by_one_replica_is_a_hit_on_the_other(db: Database) -> None:
    now = [0.0]
    a, b = (SharedAnswerCache(db, size=3, clock=lambda: now[0]) for _ in range(2))
    assert b.get(("doctor", "h0")) is None and b.misses == 1
    a.put(("doctor", "h0"), explanation("first"))
    assert b.get(("doctor", "h0")) == explanation("first") and b.hits == 1
    assert b.get(("other-model", "h0")) is None
    a.PRUNE_EVERY = 1
    for i in range(1, 5):
        now[0] = i
        a.put(("doctor", f"h{i}"), explanation(f"n{i}"))
    assert len(b) == 3 and b.get(("doctor", "h0")) is None and b.get(("doctor", "h4")) == explanation("n4")
