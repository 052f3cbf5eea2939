"""No secret of the corpus (tests/secret_corpus.py) is stored by KB growth: not in the candidates table
(logs the KB could not answer, "Didn't help" votes), not in a submission (the source log of the Slack
form and its pre-filled fields), not in a case file written by `kb add`, not in a log record; even when
the caller hands over the raw, unredacted text."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import AUTHOR, NOFILE_CASE_YAML, NOFILE_LOG
from secret_corpus import SHAPES, corpus_paste, leaks

from bot.kb_growth.caseyaml import parse_case_text


def _all_rows(db_path: Path) -> str:
    conn = sqlite3.connect(db_path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for t in tables for row in conn.execute(f"SELECT * FROM {t}"))  # noqa: S608
    finally:
        conn.close()


def test_candidates_submissions_and_case_files_hold_no_secret(growth: Any, grow_settings: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    raw = corpus_paste()
    # a Slack form opened on the raw message: the submission keeps its source log and pre-filled fields
    draft = growth.draft_from_log(raw, author_id=AUTHOR, channel="C0CHAN01", message_ts="1700000400.000100",
                                  permalink="https://example.slack.com/archives/C0CHAN01/p1700000400000100")
    assert draft.submission.source_text and leaks(draft.submission.source_text) == []
    assert leaks(str(draft.form.as_dict())) == []
    # an unknown answer and a "Didn't help" vote: both store evidence as candidates
    growth.note_answer(answer_id="a1", verdict="unknown", evidence=raw, channel="C0CHAN01", user_id=AUTHOR)
    growth.vote(answer_id="a2", user_id=AUTHOR, value="not_helpful", case_id="kv-cache-no-memory",
                verdict="match", channel="C0CHAN01", evidence=raw)
    stored = _all_rows(Path(grow_settings.kb_db_path))
    assert "chatcmpl-" in stored  # the lines themselves were stored
    assert leaks(stored) == []
    # `kb add`: a case whose example logs carry secrets is written without them (and still valid)
    extra = "\n".join(s.line for s in SHAPES[:20])
    case = parse_case_text(NOFILE_CASE_YAML.replace(
        "      ERROR 05-02 10:01:13 [core.py:396] OSError",
        "      " + extra.replace("\n", "\n      ") + "\n      ERROR 05-02 10:01:13 [core.py:396] OSError", 1,
    ), "case.yaml")
    assert leaks(case.examples[0].log) != []  # the input really held them
    applied = growth.add_case(case)
    written = applied.written.path.read_text(encoding="utf-8")
    assert SHAPES[0].marker in written and leaks(written) == []
    assert growth.pipeline.match(NOFILE_LOG).best.case_id == "too-many-open-files"
    assert leaks("\n".join(r.getMessage() for r in caplog.records)) == []
