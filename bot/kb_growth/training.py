"""Training rows for the learned ranker from the team's own work (issue 26, item 3): "Fixed it" / "Didn't help"
votes and the cases reviewers accepted. `vllm-doctor train --with-feedback` adds them to the labelled file.

    "Fixed it" on an answer naming case C      → the answer's evidence, expected C
    "Didn't help" on an answer naming case C   → the evidence, expected none: C must not be the confident answer
    an approved submission that wrote case C   → each example of C as the KB holds it now, expected C

Rows are the labelled-file shape (`id`, `log`, `expected`, `source`, `note`). A row that cannot be used is left
out with one line naming it: a vote on a case the KB does not hold (deleted or renamed), an accepted case since
deleted, an empty log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.kb_growth.db import Database


@dataclass(frozen=True)
class TrainingRows:
    rows: list[dict[str, Any]]
    problems: list[str]  # one line per row left out, naming it


def training_rows(db: Database, known_cases: set[str], examples: dict[str, list[tuple[str, str]]]) -> TrainingRows:
    """Rows from the votes and the accepted submissions in `db`; `known_cases`: the live KB's case ids;
    `examples`: case id → [(source, log)] of the live KB."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    with db.read() as conn:
        votes = conn.execute(
            "SELECT answer_id, user_id, case_id, value, evidence FROM votes ORDER BY created_at, answer_id, user_id"
        ).fetchall()
        accepted = conn.execute(
            "SELECT id, written_case FROM submissions WHERE status = 'approved' ORDER BY decided_at, id"
        ).fetchall()
    for v in votes:
        name = f"vote {v['answer_id']}/{v['user_id']}"
        case_id = v["case_id"]
        if not case_id:
            continue  # a vote on an "unknown" answer names no case: nothing to learn for the ranker
        if case_id not in known_cases:
            problems.append(f"{name}: case {case_id!r} is no case in the KB (deleted or renamed); row left out")
            continue
        log = (v["evidence"] or "").strip()
        if not log:
            problems.append(f"{name}: empty log (the vote was stored without the answer's evidence); row left out")
            continue
        fixed = v["value"] == "fixed"
        rows.append({"id": f"vote-{v['answer_id']}-{v['user_id']}", "log": log,
                     "expected": case_id if fixed else None, "source": "https://slack.com/",
                     "note": f"feedback: {'fixed it' if fixed else 'did not help'} ({case_id})"})
    for a in accepted:
        name = f"accepted submission {a['id']}"
        case_id = a["written_case"]
        if not case_id or case_id not in known_cases:
            problems.append(f"{name}: case {case_id!r} is no case in the KB any more (deleted); rows left out")
            continue
        for n, (source, log) in enumerate(examples.get(case_id, []), 1):
            if not log.strip():
                problems.append(f"{name}: example {n} of {case_id} has an empty log; row left out")
                continue
            rows.append({"id": f"accepted-{a['id']}-{n}", "log": log, "expected": case_id,
                         "source": source if source.startswith("https://") else "https://slack.com/",
                         "note": f"accepted case {case_id}"})
    return TrainingRows(rows, problems)
