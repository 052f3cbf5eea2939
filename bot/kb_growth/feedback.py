""""Fixed it" / "Didn't help" on answers: stored votes, per-case outcomes and the ranking prior.

Storage: one row per (answer, user), so a user who clicks again changes their vote instead of adding one.
Counting: a case's outcome counts each user once — their latest vote on any answer that named the case —
so "solved 9 of 10" means nine of ten people said the case fixed it, and one user clicking on a hundred
answers is still one vote. The ranking prior uses the same counts (docs/kb-growth.md):

    prior = MAX_PRIOR * (2 * (solved + 1) / (total + 2) - 1)      Laplace-smoothed solve rate, centred

which is 0 without votes, +0.01 after one "fixed", and stays strictly inside ±MAX_PRIOR (0.03) however
many votes arrive; bot.diagnosis.match clamps it again. A signature hit is worth 0.72–0.80, so feedback only
reorders cases that are otherwise within a few points of each other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from bot.diagnosis.match import MAX_PRIOR
from bot.diagnosis.paste import redacted
from bot.kb_growth.db import Database
from bot.storage import StorageError

log = logging.getLogger(__name__)

Vote = Literal["fixed", "not_helpful"]
VOTES: tuple[Vote, ...] = ("fixed", "not_helpful")

# one row per (case, user): that user's latest vote on any answer naming the case
_LATEST_PER_USER = """
    SELECT case_id, user_id, value FROM (
        SELECT case_id, user_id, value,
               ROW_NUMBER() OVER (PARTITION BY case_id, user_id ORDER BY updated_at DESC, answer_id DESC) AS rn
        FROM votes WHERE case_id IS NOT NULL {where}
    ) AS latest WHERE rn = 1
"""


@dataclass(frozen=True)
class Outcome:
    case_id: str
    solved: int
    total: int

    def text(self) -> str:
        return f"solved {self.solved} of {self.total}"

    @property
    def prior(self) -> float:
        return prior_from_counts(self.solved, self.total)


@dataclass(frozen=True)
class VoteResult:
    previous: Vote | None  # this user's earlier vote on this answer, if any
    outcome: Outcome | None  # the case's outcome after the vote (None: the answer named no case)


def _kept(evidence: str) -> str | None:
    from bot.kb_growth.candidates import _without_line_numbers  # answers number their evidence lines

    text = redacted(_without_line_numbers(evidence)).text.strip() if evidence and evidence.strip() else ""
    return text[-8000:] or None


def prior_from_counts(solved: int, total: int) -> float:
    if total <= 0:
        return 0.0
    rate = (solved + 1) / (total + 2)
    return MAX_PRIOR * (2 * rate - 1)


class FeedbackStore:
    def __init__(self, db: Database, refresh_s: float = 30.0):
        self.db = db
        self._refresh_s = refresh_s
        self._cache: dict[str, Outcome] | None = None
        self._cached_at = 0.0
        self._last_good: dict[str, Outcome] = {}  # served while the database cannot be read
        self._lock = threading.Lock()

    def vote(
        self,
        *,
        answer_id: str,
        user_id: str,
        value: Vote,
        case_id: str | None,
        verdict: str,
        channel: str,
        now: float | None = None,
        evidence: str = "",
    ) -> VoteResult:
        """One vote per (answer, user); `evidence`: the answer's evidence lines, kept redacted as the log of the
        ranker's training row (bot/kb_growth/training.py)."""
        if value not in VOTES:
            raise ValueError(f"vote must be one of {VOTES}, not {value!r}")
        if not answer_id or not user_id:
            raise ValueError("a vote needs an answer id and a user id")
        now = time.time() if now is None else now
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT value FROM votes WHERE answer_id = ? AND user_id = ?", (answer_id, user_id)
            ).fetchone()
            conn.execute(
                """INSERT INTO votes (answer_id, user_id, case_id, verdict, channel, value, created_at, updated_at,
                                      evidence)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (answer_id, user_id) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,
                       evidence = COALESCE(excluded.evidence, votes.evidence)""",
                (answer_id, user_id, case_id, verdict, channel, value, now, now, _kept(evidence)),
            )
        self.invalidate()
        return VoteResult(row["value"] if row else None, self.outcome(case_id) if case_id else None)

    def invalidate(self) -> None:
        with self._lock:
            self._cache = None

    def outcomes(self) -> dict[str, Outcome]:
        """Every case with at least one vote; cached for `refresh_s` (votes from this process invalidate)."""
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cached_at < self._refresh_s:
                return self._cache
        counts: dict[str, list[int]] = {}
        try:
            with self.db.read() as conn:
                for row in conn.execute(_LATEST_PER_USER.format(where="")):
                    solved_total = counts.setdefault(row["case_id"], [0, 0])
                    solved_total[0] += row["value"] == "fixed"
                    solved_total[1] += 1
        except StorageError as exc:  # a database outage must not cost an answer: rank on the last priors read
            from bot.ops import metrics

            metrics.DATABASE_ERRORS.labels(operation="priors").inc()
            log.warning("could not read the feedback priors (%s); using the %d read last", exc, len(self._last_good))
            with self._lock:
                self._cache, self._cached_at = self._last_good, time.monotonic()
                return self._last_good
        result = {cid: Outcome(cid, s, t) for cid, (s, t) in counts.items()}
        with self._lock:
            self._cache, self._cached_at, self._last_good = result, time.monotonic(), result
        return result

    def outcome(self, case_id: str) -> Outcome:
        with self.db.read() as conn:
            rows = conn.execute(_LATEST_PER_USER.format(where="AND case_id = ?"), (case_id,)).fetchall()
        return Outcome(case_id, sum(r["value"] == "fixed" for r in rows), len(rows))

    def outcome_text(self, case_id: str | None) -> str | None:
        """"solved 9 of 10" for the answer's context line; None when nobody has voted on the case yet."""
        if not case_id:
            return None
        outcome = self.outcomes().get(case_id)
        return outcome.text() if outcome else None

    def priors(self) -> LivePriors:
        """A read-only mapping case id → prior that follows new votes (for bot.diagnosis.match.Matcher)."""
        return LivePriors(self)

    def totals(self) -> dict[str, int]:
        with self.db.read() as conn:
            row = conn.execute(
                """SELECT COUNT(*) AS votes, COUNT(DISTINCT user_id) AS users,
                          COALESCE(SUM(CASE WHEN value = 'fixed' THEN 1 ELSE 0 END), 0) AS fixed,
                          COALESCE(SUM(CASE WHEN value = 'not_helpful' THEN 1 ELSE 0 END), 0) AS not_helpful
                   FROM votes"""
            ).fetchone()
        assert row is not None  # an aggregate without GROUP BY returns one row
        return {k: int(row[k]) for k in ("votes", "users", "fixed", "not_helpful")}


class LivePriors(Mapping[str, float]):
    """Mapping view of the current priors; cheap to query per candidate (served from the store's cache)."""

    def __init__(self, store: FeedbackStore):
        self._store = store

    def _current(self) -> dict[str, float]:
        return {cid: o.prior for cid, o in self._store.outcomes().items()}

    def __getitem__(self, case_id: str) -> float:
        outcome = self._store.outcomes().get(case_id)
        if outcome is None:
            raise KeyError(case_id)
        return outcome.prior

    def get(self, case_id: str, default: float = 0.0) -> float:  # type: ignore[override]
        outcome = self._store.outcomes().get(case_id)
        return outcome.prior if outcome is not None else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._store.outcomes())
