"""Candidates for new cases: logs the KB could not answer ("unknown") or whose answer did not help.

Text is redacted before it is stored (bot/diagnosis/redact.py) and kept short (the distilled evidence, not the
paste). The same failure pasted again folds into one row (`seen` counts it): the fingerprint is the
sha256 of the generalised root error lines (as for suggested signatures), so timestamps, PIDs and paths do not make a log look new. When a
case is added whose signatures match a candidate, the candidate is marked resolved by that case.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.diagnosis.distill import distill
from bot.diagnosis.match import SignatureScanner
from bot.diagnosis.paste import redacted
from bot.kb_growth.db import Database
from bot.kb_growth.suggest import generalise
from indexer.text import clean_line, mask
from kb.schema import Case

Reason = Literal["unknown", "not_helpful"]
MAX_TEXT = 8000
MAX_SUMMARY = 300


@dataclass(frozen=True)
class Candidate:
    id: int
    reason: Reason
    summary: str
    text: str
    case_id: str | None
    channel: str | None
    user_id: str | None
    answer_id: str | None
    seen: int
    first_seen: float
    last_seen: float
    resolved_by: str | None
    root_text: str | None = None  # the root line (bot/diagnosis/root.py), redacted
    component: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    threads: tuple[tuple[str, str | None], ...] = ()  # (thread, permalink) it was pasted in, first first


_NUMBERED = re.compile(r"^ *\d+  ")


def _without_line_numbers(text: str) -> str:
    """Answers keep evidence as "  123  line" (bot.slack.reply.answer.evidence_text); store the lines themselves."""
    lines = text.splitlines()
    if lines and all(_NUMBERED.match(line) for line in lines if line.strip()):
        return "\n".join(_NUMBERED.sub("", line) for line in lines)
    return text


def _fingerprint(text: str) -> tuple[str, str]:
    """(fingerprint, summary) of a log: its root error lines, masked; the first one is the summary."""
    distilled = distill(text)
    roots = [r.text for r in distilled.root_errors] or [e.text for e in distilled.evidence[-5:]]
    if not roots:
        roots = [clean_line(line).strip() for line in text.splitlines() if line.strip()][-5:]
    key = "\n".join(generalise(r) or mask(r) for r in roots)  # paths, numbers, quoted names do not count
    summary = roots[0] if roots else ""
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest(), summary


class CandidateStore:
    def __init__(self, db: Database):
        self.db = db

    def add(
        self,
        text: str,
        reason: Reason,
        *,
        case_id: str | None = None,
        channel: str | None = None,
        user_id: str | None = None,
        answer_id: str | None = None,
        now: float | None = None,
        root_text: str | None = None,
        component: str | None = None,
        thread: str | None = None,
        permalink: str | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> Candidate | None:
        """Record (or count again) a log; returns None for a text with nothing in it. `thread` (channel and
        thread ts) and `permalink` say where it was pasted: the team-learning loop counts threads."""
        safe = redacted(_without_line_numbers(text)).text.strip()
        if not safe:
            return None
        fingerprint, summary = _fingerprint(safe)
        summary = summary[:MAX_SUMMARY]  # from the redacted text
        safe = safe[-MAX_TEXT:]  # log tails carry the error
        root = redacted(root_text).text.strip()[:MAX_SUMMARY] if root_text and root_text.strip() else None
        link = redacted(permalink).text.strip()[:500] if permalink else None
        shown = json.dumps({str(k)[:40]: str(v)[:40] for k, v in (versions or {}).items()}, sort_keys=True)
        now = time.time() if now is None else now
        with self.db.write() as conn:
            conn.execute(
                """INSERT INTO candidates (fingerprint, reason, summary, text, case_id, channel, user_id, answer_id,
                                           seen, first_seen, last_seen, root_text, component, versions)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)
                   ON CONFLICT (fingerprint) DO UPDATE SET
                       seen = candidates.seen + 1, last_seen = excluded.last_seen, reason = excluded.reason,
                       case_id = COALESCE(excluded.case_id, candidates.case_id), channel = excluded.channel,
                       user_id = excluded.user_id, answer_id = excluded.answer_id, text = excluded.text,
                       root_text = COALESCE(excluded.root_text, candidates.root_text),
                       component = COALESCE(excluded.component, candidates.component),
                       versions = excluded.versions""",
                (fingerprint, reason, summary, safe, case_id, channel, user_id, answer_id, now, now, root, component,
                 shown),
            )
            row = conn.execute("SELECT * FROM candidates WHERE fingerprint = ?", (fingerprint,)).fetchone()
            assert row is not None  # upserted by the statement above, in this transaction
            where = thread or (f"{channel}/{answer_id}" if channel or answer_id else f"candidate/{row['id']}")
            conn.execute(
                """INSERT INTO candidate_threads (candidate_id, thread, channel, permalink, seen_at)
                   VALUES (?, ?, ?, ?, ?) ON CONFLICT (candidate_id, thread) DO NOTHING""",
                (row["id"], where[:200], channel, link, now),
            )
            threads = self._threads(conn, [row["id"]])
        return _candidate(row, threads.get(row["id"], ()))

    @staticmethod
    def _threads(conn: object, ids: list[int]) -> dict[int, tuple[tuple[str, str | None], ...]]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = conn.execute(  # type: ignore[attr-defined]
            f"SELECT candidate_id, thread, permalink FROM candidate_threads WHERE candidate_id IN ({marks}) "
            "ORDER BY seen_at, thread", tuple(ids)).fetchall()
        out: dict[int, list[tuple[str, str | None]]] = {}
        for r in rows:
            out.setdefault(int(r["candidate_id"]), []).append((r["thread"], r["permalink"]))
        return {k: tuple(v) for k, v in out.items()}

    def unknowns(self, limit: int = 2000) -> list[Candidate]:
        """Open candidates the KB could not answer, oldest first, with their threads (the loop's input)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM candidates WHERE resolved_by IS NULL AND reason = 'unknown' "
                "ORDER BY first_seen, id LIMIT ?", (limit,)).fetchall()
            threads = self._threads(conn, [int(r["id"]) for r in rows])
        return [_candidate(r, threads.get(int(r["id"]), ())) for r in rows]

    def open(self, limit: int = 20) -> list[Candidate]:
        """Unresolved candidates, most often seen and most recent first."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM candidates WHERE resolved_by IS NULL ORDER BY seen DESC, last_seen DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [_candidate(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self.db.read() as conn:
            row = conn.execute(
                """SELECT COALESCE(SUM(CASE WHEN resolved_by IS NULL THEN 1 ELSE 0 END), 0) AS open,
                          COALESCE(SUM(CASE WHEN resolved_by IS NOT NULL THEN 1 ELSE 0 END), 0) AS resolved,
                          COALESCE(SUM(CASE WHEN resolved_by IS NULL AND reason = 'unknown' THEN 1 ELSE 0 END), 0)
                              AS unknown,
                          COALESCE(SUM(CASE WHEN resolved_by IS NULL AND reason = 'not_helpful' THEN 1 ELSE 0 END), 0)
                              AS not_helpful
                   FROM candidates"""
            ).fetchone()
        assert row is not None  # an aggregate without GROUP BY returns one row
        return {k: int(row[k]) for k in ("open", "resolved", "unknown", "not_helpful")}

    def resolve_with(self, case: Case) -> int:
        """Mark open candidates that the new case's signatures now match; returns how many."""
        scanner = SignatureScanner([case])
        with self.db.read() as conn:
            rows = conn.execute("SELECT id, text FROM candidates WHERE resolved_by IS NULL").fetchall()
        hit_ids = [r["id"] for r in rows if scanner.scan(distill(r["text"]).cleaned)]
        if hit_ids:
            with self.db.write() as conn:
                conn.executemany(
                    "UPDATE candidates SET resolved_by = ? WHERE id = ? AND resolved_by IS NULL",
                    [(case.id, i) for i in hit_ids],
                )
        return len(hit_ids)


def _candidate(row: object, threads: tuple[tuple[str, str | None], ...] = ()) -> Candidate:
    r = dict(row)  # type: ignore[call-overload]
    try:
        versions = json.loads(r.get("versions") or "{}")
    except ValueError:
        versions = {}
    return Candidate(
        r["id"], r["reason"], r["summary"], r["text"], r["case_id"], r["channel"], r["user_id"], r["answer_id"],
        r["seen"], r["first_seen"], r["last_seen"], r["resolved_by"], r.get("root_text"), r.get("component"),
        versions if isinstance(versions, dict) else {}, threads,
    )
