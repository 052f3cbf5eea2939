"""Cases proposed from Slack, from the moment the form opens to the reviewer's decision.

    draft ──(author submits a valid form)──▶ pending ──(reviewer approves)──▶ approving ──▶ approved
                                                   └──(reviewer rejects)──▶ rejected

Every transition is one conditional UPDATE (… WHERE status = 'pending'), so two reviewers clicking at
once cannot both approve, and an approval cannot race a rejection: the loser gets ReviewConflict
saying who decided. `approving` is held only while the file is written and indexed; a crash there
leaves it, and `recover()` (run at start-up) puts rows older than a few minutes back to pending.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from bot.errors import ReviewConflict
from bot.kb_growth.db import Database
from bot.storage import Row

Status = Literal["draft", "pending", "approving", "approved", "rejected"]
Kind = Literal["new", "example"]
STALE_APPROVING_S = 300.0


@dataclass(frozen=True)
class Submission:
    id: str
    status: Status
    kind: Kind
    author_id: str
    author_name: str
    channel: str | None
    message_ts: str | None
    permalink: str | None
    source_text: str
    prefill: dict[str, Any]
    case: dict[str, Any] | None  # kind new: the whole case; kind example: {"examples": […], "signatures": […]}
    target_case: str | None
    report: dict[str, Any]  # {"nearest": [...], "warnings": [...]}
    review_messages: list[tuple[str, str]]
    reviewer_id: str | None
    decided_at: float | None
    note: str | None
    written_case: str | None
    written_path: str | None
    created_at: float

    @property
    def title(self) -> str:
        if self.case and self.kind == "new":
            return str(self.case.get("title", ""))
        return str(self.prefill.get("title", ""))


def _row(row: Row | None) -> Submission | None:
    if row is None:
        return None
    return Submission(
        id=row["id"],
        status=row["status"],
        kind=row["kind"],
        author_id=row["author_id"],
        author_name=row["author_name"],
        channel=row["channel"],
        message_ts=row["message_ts"],
        permalink=row["permalink"],
        source_text=row["source_text"],
        prefill=json.loads(row["prefill_json"] or "{}"),
        case=json.loads(row["case_json"]) if row["case_json"] else None,
        target_case=row["target_case"],
        report=json.loads(row["report_json"] or "{}"),
        review_messages=[tuple(x) for x in json.loads(row["review_json"] or "[]")],
        reviewer_id=row["reviewer_id"],
        decided_at=row["decided_at"],
        note=row["note"],
        written_case=row["written_case"],
        written_path=row["written_path"],
        created_at=row["created_at"],
    )


class SubmissionStore:
    def __init__(self, db: Database):
        self.db = db

    def create_draft(
        self,
        *,
        author_id: str,
        author_name: str = "",
        channel: str | None = None,
        message_ts: str | None = None,
        permalink: str | None = None,
        source_text: str = "",
        prefill: dict[str, Any] | None = None,
    ) -> Submission:
        sub_id = "kb" + secrets.token_hex(5)
        now = time.time()
        with self.db.write() as conn:
            conn.execute(
                """INSERT INTO submissions (id, status, author_id, author_name, channel, message_ts, permalink,
                                            source_text, prefill_json, created_at, updated_at)
                   VALUES (?, 'draft', ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (sub_id, author_id, author_name, channel, message_ts, permalink, source_text,
                 json.dumps(prefill or {}), now, now),
            )
        return self.get_or_raise(sub_id)

    def get(self, sub_id: str) -> Submission | None:
        with self.db.read() as conn:
            return _row(conn.execute("SELECT * FROM submissions WHERE id = ?", (sub_id,)).fetchone())

    def get_or_raise(self, sub_id: str) -> Submission:
        sub = self.get(sub_id)
        if sub is None:
            raise ReviewConflict(f"no KB submission {sub_id!r} (it may have expired); start again from the message")
        return sub

    def list(self, status: Status | None = None, limit: int = 50) -> list[Submission]:
        with self.db.read() as conn:
            if status:
                rows = conn.execute(
                    "SELECT * FROM submissions WHERE status = ? ORDER BY created_at DESC LIMIT ?", (status, limit)
                ).fetchall()
            else:
                rows = conn.execute("SELECT * FROM submissions ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        return [s for s in (_row(r) for r in rows) if s is not None]

    def counts(self) -> dict[str, int]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT status, COUNT(*) AS n FROM submissions GROUP BY status").fetchall()
        return {r["status"]: int(r["n"]) for r in rows}

    def stage(
        self, sub_id: str, *, kind: Kind, case: dict[str, Any], target_case: str | None, report: dict[str, Any]
    ) -> Submission:
        """Store the validated form on a draft (still a draft: the author may be choosing about duplicates)."""
        self._transition(
            sub_id,
            ("draft",),
            "draft",
            "kind = ?, case_json = ?, target_case = ?, report_json = ?",
            (kind, json.dumps(case), target_case, json.dumps(report)),
        )
        return self.get_or_raise(sub_id)

    def submit(self, sub_id: str, *, kind: Kind | None = None, target_case: str | None = None) -> Submission:
        sets, args = "kind = COALESCE(?, kind), target_case = COALESCE(?, target_case)", (kind, target_case)
        self._transition(sub_id, ("draft",), "pending", sets, args, require_case=True)
        return self.get_or_raise(sub_id)

    def add_review_message(self, sub_id: str, channel: str, ts: str) -> None:
        with self.db.write() as conn:
            row = conn.execute("SELECT review_json FROM submissions WHERE id = ?", (sub_id,)).fetchone()
            if row is None:
                return
            messages = json.loads(row["review_json"] or "[]")
            messages.append([channel, ts])
            conn.execute("UPDATE submissions SET review_json = ? WHERE id = ?", (json.dumps(messages), sub_id))

    def claim(self, sub_id: str, reviewer_id: str) -> Submission:
        """pending → approving, for exactly one reviewer."""
        self._transition(sub_id, ("pending",), "approving", "reviewer_id = ?", (reviewer_id,))
        return self.get_or_raise(sub_id)

    def finish(self, sub_id: str, *, written_case: str, written_path: str) -> Submission:
        self._transition(
            sub_id,
            ("approving",),
            "approved",
            "decided_at = ?, written_case = ?, written_path = ?",
            (time.time(), written_case, written_path),
        )
        return self.get_or_raise(sub_id)

    def release(self, sub_id: str, note: str) -> None:
        """approving → pending after a failed write (the reviewer is told why)."""
        self._transition(sub_id, ("approving",), "pending", "reviewer_id = NULL, note = ?", (note,))

    def reject(self, sub_id: str, reviewer_id: str, note: str = "") -> Submission:
        self._transition(
            sub_id, ("pending",), "rejected", "reviewer_id = ?, decided_at = ?, note = ?", (reviewer_id, time.time(), note)
        )
        return self.get_or_raise(sub_id)

    def recover(self, older_than_s: float = STALE_APPROVING_S) -> int:
        """Approvals interrupted by a crash go back to pending (their file, if written, is found again by
        id collision handling and the reviewer simply approves again). Nothing to do on a read-only file."""
        with self.db.read() as _:
            if self.db.read_only:
                return 0
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE submissions SET status = 'pending', reviewer_id = NULL, updated_at = ? "
                "WHERE status = 'approving' AND updated_at < ?",
                (time.time(), time.time() - older_than_s),
            )
            return cur.rowcount

    def _transition(
        self,
        sub_id: str,
        from_states: tuple[Status, ...],
        to_state: Status,
        sets: str,
        args: tuple[Any, ...],
        require_case: bool = False,
    ) -> None:
        marks = ",".join("?" for _ in from_states)
        extra = " AND case_json IS NOT NULL" if require_case else ""
        with self.db.write() as conn:
            cur = conn.execute(
                f"UPDATE submissions SET status = ?, updated_at = ?, {sets} "
                f"WHERE id = ? AND status IN ({marks}){extra}",
                (to_state, time.time(), *args, sub_id, *from_states),
            )
            if cur.rowcount == 1:
                return
            row = conn.execute("SELECT status, reviewer_id FROM submissions WHERE id = ?", (sub_id,)).fetchone()
        if row is None:
            raise ReviewConflict(f"no KB submission {sub_id!r}")
        status, reviewer = row["status"], row["reviewer_id"]
        if status in ("approved", "rejected", "approving"):
            by = f" by {reviewer}" if reviewer else ""
            raise ReviewConflict(f"this case was already {'being approved' if status == 'approving' else status}{by}")
        raise ReviewConflict(f"this KB submission is {status}, not {' or '.join(from_states)}")
