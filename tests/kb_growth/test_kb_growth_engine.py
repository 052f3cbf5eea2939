"""KB growth with the real engine (real MiniLM, real FAISS + BM25 index, real SQLite), on a temporary copy
of the KB: adds go live without a restart, 20 concurrent adds lose nothing, a crash between writing and
indexing heals on the next start, review permissions hold, feedback nudges rankings only within bounds,
and the CLI adds, searches and reports."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import (
    AUTHOR,
    GROUP_REVIEWER,
    NOFILE_CASE_YAML,
    NOFILE_LOG,
    NOFILE_LOG_2,
    REVIEWER,
    REVIEWER_GROUP,
    STRANGER,
    make_engine,
    widget_case_data,
)

from bot.diagnosis.match import MAX_PRIOR, Matcher
from bot.errors import InvalidCase, PermissionDenied, ReviewConflict
from bot.kb_growth import KBGrowth
from bot.kb_growth.caseyaml import parse_case_text
from indexer.index import MANIFEST_NAME, KBIndex, case_documents
from kb.loader import load_kb
from kb.schema import Case

REPO = Path(__file__).resolve().parent.parent.parent


def _manifest(settings: Any) -> dict[str, Any]:
    return json.loads((Path(settings.index_dir) / MANIFEST_NAME).read_text())


def test_an_added_case_is_matched_by_the_very_next_paste(growth: Any, engine: Any, grow_settings: Any) -> None:
    before = engine.match(NOFILE_LOG)
    assert before.verdict != "match" or before.best.case_id != "too-many-open-files"
    applied = growth.add_case(parse_case_text(NOFILE_CASE_YAML, "case.yaml"))
    assert applied.live and applied.written.path == Path(grow_settings.kb_dir) / "serving" / "too-many-open-files.yaml"
    assert applied.live_seconds > 0  # how long it took is measured in bench/bench_kb_growth.py, not here
    after = engine.match(NOFILE_LOG)
    assert after.verdict == "match" and after.best.case_id == "too-many-open-files" and after.best.signature_hit
    assert engine.match(NOFILE_LOG_2).best.case_id == "too-many-open-files"
    assert "too-many-open-files" in engine.index  # the index, not only the signature scanner, holds it
    assert _manifest(grow_settings)["case_hashes"] == load_kb(grow_settings.kb_dir).case_hashes


def test_twenty_concurrent_adds_lose_nothing_and_the_index_matches_the_files(growth: Any, engine: Any, grow_settings: Any) -> None:
    base = len(engine.kb.cases)
    cases = [Case.model_validate(widget_case_data(n)) for n in range(10)]
    cases += [Case.model_validate(widget_case_data(n, case_id="widget-fault-same")) for n in range(10, 20)]
    results: list[Any] = []
    errors: list[BaseException] = []

    def add(case: Case) -> None:
        try:
            results.append(growth.add_case(case))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    written_ids = {r.written.case.id for r in results}
    assert len(written_ids) == 20
    on_disk = load_kb(grow_settings.kb_dir)  # strict: every file valid
    assert len(on_disk.cases) == base + 20 and written_ids <= set(on_disk.by_id())
    engine.match("warm")  # any request reloads whatever the last writer left
    assert engine.kb.content_hash == on_disk.content_hash
    assert set(engine.index.case_ids) == set(on_disk.by_id())
    assert _manifest(grow_settings)["case_hashes"] == on_disk.case_hashes
    reopened = KBIndex.open(on_disk, Path(grow_settings.index_dir), lambda: engine._encoder())
    assert reopened.stats.action == "loaded" and reopened.stats.encoded == 0
    for n in (0, 9, 15):  # each case answers its own log, by signature
        best = engine.match(f"RuntimeError: WidgetFault{n:03d}: controller 1 tripped").best
        assert best.signature_hit and best.title == f"Widget controller {n} trips with WidgetFault{n:03d}"


def test_a_crash_between_writing_and_indexing_heals_on_the_next_start(growth: Any, engine: Any, grow_settings: Any) -> None:
    case = parse_case_text(NOFILE_CASE_YAML, "case.yaml")
    growth.writer.add(case)  # the file is written …and the process dies before the index is updated
    assert "too-many-open-files" not in _manifest(grow_settings)["case_hashes"]
    restarted = make_engine(grow_settings)  # next start: same KB dir and index dir
    stats = restarted.index.stats
    assert stats.action == "updated"
    assert stats.encoded == len(case_documents(case))  # only the new case was embedded
    assert stats.reused == stats.documents - stats.encoded
    assert restarted.match(NOFILE_LOG).best.case_id == "too-many-open-files"
    assert _manifest(grow_settings)["kb_content_hash"] == load_kb(grow_settings.kb_dir).content_hash


def test_invalid_cases_are_refused_with_the_field_and_nothing_is_written(growth: Any, grow_settings: Any) -> None:
    fires_on_healthy = Case.model_validate(widget_case_data(1) | {"signatures": [r"WidgetFault001", r"Automatically detected platform"]})
    with pytest.raises(InvalidCase) as exc:
        growth.add_case(fires_on_healthy)
    assert "healthy start-up log" in exc.value.problems["signatures"]
    assert not list(Path(grow_settings.kb_dir).glob("*/widget-fault-001.yaml"))


def test_review_needs_a_reviewer_and_allows_one_decision(grow_settings: Any, engine: Any) -> None:
    growth = KBGrowth(
        grow_settings.model_copy(update={"kb_reviewer_group": REVIEWER_GROUP}),
        engine,
        group_members=lambda group: [GROUP_REVIEWER] if group == REVIEWER_GROUP else [],
    )
    draft = growth.draft_from_log(NOFILE_LOG, author_id=AUTHOR, author_name="alice", channel="C1",
                                  permalink="https://test.slack.com/archives/C1/p1700000001000100")
    assert "Too many open files" in draft.form.signatures and draft.form.title == "Too many open files"
    form = draft.form
    form.title = "The server runs out of file descriptors"
    form.title_zh = "文件描述符耗尽"
    form.cause = "The soft open-files limit of the container runs out under load and the engine cannot open sockets."
    form.fix = "Raise the open-files limit.\n$ ulimit -n 65535"
    form.examples += "\n---\nhttps://github.com/example-org/vllm-notes/issues/2\n" + NOFILE_LOG_2
    checked = growth.check(form)
    assert not checked.duplicates
    growth.stage(draft.submission.id, checked)
    sub = growth.submit(draft.submission.id, "new")
    assert sub.status == "pending"
    for outsider in (STRANGER, AUTHOR):
        with pytest.raises(PermissionDenied):
            growth.approve(sub.id, outsider)
    assert growth.submissions.get(sub.id).status == "pending"
    assert not list(Path(grow_settings.kb_dir).glob("*/the-server-runs-out-file-descriptors.yaml"))
    approval = growth.approve(sub.id, GROUP_REVIEWER, "gina")  # a member of the reviewer user group
    assert approval.submission.status == "approved" and approval.submission.reviewer_id == GROUP_REVIEWER
    assert approval.applied.written.path.is_file()
    with pytest.raises(ReviewConflict, match="already approved"):
        growth.approve(sub.id, REVIEWER)
    assert engine.match(NOFILE_LOG).best.case_id == approval.applied.written.case.id


def _score(match: Any) -> float:
    """The ranking score (Match.score may be capped for display when two candidates are close)."""
    return float(match.scores["score"])


def _close_pair(engine: Any) -> tuple[Any, str, Any, Any]:
    """A query without signature hits whose two best candidates are within 0.045 of each other."""
    from bot.diagnosis.distill import distill

    plain = Matcher(engine.kb, engine.index, engine.thresholds)
    for case in engine.kb.cases:
        for query in (case.title, case.fix[0].text, " ".join(case.keywords)):
            if not query.strip():
                continue
            for mode in ("hybrid", "bm25"):
                ranked = plain.match(distill(query), mode=mode)[1]
                if any(m.signature_hit for m in ranked):  # signature hits rank first whatever the prior
                    continue
                if len(ranked) >= 2 and 0 < _score(ranked[0]) - _score(ranked[1]) < 0.045:
                    return distill(query), mode, ranked[0], ranked[1]
    raise AssertionError("no two cases within 0.045 of each other for any KB title or fix step")


def test_feedback_prior_is_bounded_and_a_flood_by_one_user_counts_once(growth: Any, engine: Any, tmp_path: Path) -> None:
    from bot.kb_growth.db import Database
    from bot.kb_growth.feedback import FeedbackStore

    distilled, mode, first, second = _close_pair(engine)
    for n in range(100):  # one user floods "Didn't help" on the leader and "Fixed it" on the runner-up
        growth.vote(answer_id=f"f{n}", user_id="UFLOOD", value="not_helpful", case_id=first.case_id, verdict="uncertain", channel="C1")
        growth.vote(answer_id=f"g{n}", user_id="UFLOOD", value="fixed", case_id=second.case_id, verdict="uncertain", channel="C1")
    single = FeedbackStore(Database(tmp_path / "single.sqlite3"))  # the same user voting once on each
    single.vote(answer_id="f", user_id="UFLOOD", value="not_helpful", case_id=first.case_id, verdict="uncertain", channel="C1")
    single.vote(answer_id="g", user_id="UFLOOD", value="fixed", case_id=second.case_id, verdict="uncertain", channel="C1")
    flood = growth.feedback.priors()
    assert dict(flood) == pytest.approx(dict(single.priors()))
    assert flood[second.case_id] == pytest.approx(MAX_PRIOR / 3) and flood[first.case_id] == pytest.approx(-MAX_PRIOR / 3)
    flooded = Matcher(engine.kb, engine.index, engine.thresholds, priors=flood).match(distilled, mode=mode)[1]
    once = Matcher(engine.kb, engine.index, engine.thresholds, priors=single.priors()).match(distilled, mode=mode)[1]
    assert [(m.case_id, _score(m)) for m in flooded] == [(m.case_id, _score(m)) for m in once]

    for n in range(20):  # twenty different people agree: the runner-up overtakes, by at most MAX_PRIOR each way
        growth.vote(answer_id=f"h{n}", user_id=f"U{n}", value="not_helpful", case_id=first.case_id, verdict="uncertain", channel="C1")
        growth.vote(answer_id=f"i{n}", user_id=f"U{n}", value="fixed", case_id=second.case_id, verdict="uncertain", channel="C1")
    ranked = Matcher(engine.kb, engine.index, engine.thresholds, priors=growth.feedback.priors()).match(distilled, mode=mode)[1]
    moved = {m.case_id: m for m in ranked}
    assert ranked[0].case_id == second.case_id and _score(moved[second.case_id]) > _score(moved[first.case_id])
    assert 0 < _score(moved[second.case_id]) - _score(second) < MAX_PRIOR
    assert 0 < _score(first) - _score(moved[first.case_id]) < MAX_PRIOR
    huge = Matcher(engine.kb, engine.index, engine.thresholds, priors={second.case_id: 5.0}).match(distilled, mode=mode)[1]
    assert _score({m.case_id: m for m in huge}[second.case_id]) == pytest.approx(_score(second) + MAX_PRIOR, abs=1e-3)
    assert growth.outcome_text(second.case_id) == "solved 21 of 21"
    assert growth.outcome_text(first.case_id) == "solved 0 of 21"


def test_a_signature_hit_outranks_any_feedback(growth: Any, engine: Any) -> None:
    kv_log = engine.case("kv-cache-no-memory").examples[0].log
    best = engine.match(kv_log).matches
    runner_up = next(m for m in best[1:] if not m.signature_hit)
    priors = {"kv-cache-no-memory": -MAX_PRIOR, runner_up.case_id: +MAX_PRIOR}
    from bot.diagnosis.distill import distill

    _, ranked = Matcher(engine.kb, engine.index, engine.thresholds, priors=priors).match(distill(kv_log))
    assert ranked[0].case_id == "kv-cache-no-memory" and ranked[0].scores["prior"] == -MAX_PRIOR


# -- CLI ---------------------------------------------------------------------------------------------------------


def _kb(settings: Any, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    """`vllm-doctor kb …` in-process (same parser as the real CLI), returning (rc, stdout, stderr)."""
    from bot.cli.kb import run_kb_command
    from bot.cli.main import build_parser

    args: argparse.Namespace = build_parser().parse_args(["kb", *argv])
    out, err = io.StringIO(), io.StringIO()
    old_err, sys.stderr = sys.stderr, err
    try:
        rc = run_kb_command(args, settings, stdin=io.StringIO(stdin), stdout=out)
    finally:
        sys.stderr = old_err
    return rc, out.getvalue(), err.getvalue()


def test_cli_add_from_file_then_search_and_stats(grow_settings: Any, tmp_path: Path) -> None:
    good = tmp_path / "nofile.yaml"
    good.write_text(NOFILE_CASE_YAML, encoding="utf-8")
    rc, out, err = _kb(grow_settings, "add", "--from-file", str(good))
    assert rc == 0, err
    assert "added too-many-open-files" in out and "live in" in out
    assert (Path(grow_settings.kb_dir) / "serving" / "too-many-open-files.yaml").is_file()

    rc, out, err = _kb(grow_settings, "add", "--from-file", str(good))  # the same case again
    assert rc == 1 and "looks like a case the KB already has" in err and "too-many-open-files" in err
    rc, out, _ = _kb(grow_settings, "add", "--from-file", str(good), "--force", "--json")
    assert rc == 0 and json.loads(out)["id"] == "too-many-open-files-2"

    rc, out, _ = _kb(grow_settings, "search", "OSError: [Errno 24] Too many open files: '/var/run/x.sock'")
    assert rc == 0 and out.splitlines()[0].split()[1].startswith("too-many-open-files")

    from bot.kb_growth.db import Database
    from bot.kb_growth.feedback import FeedbackStore

    store = FeedbackStore(Database(grow_settings.kb_db_path))
    for n in range(3):
        store.vote(answer_id=f"a{n}", user_id=f"U{n}", value="fixed" if n else "not_helpful",
                   case_id="too-many-open-files", verdict="match", channel="C1")
    growth = KBGrowth(grow_settings, make_engine(grow_settings))
    growth.note_answer(answer_id="x1", verdict="unknown", evidence="RuntimeError: flux capacitor desynchronised on rank 3")
    rc, out, _ = _kb(grow_settings, "stats")
    assert rc == 0
    assert "serving" in out and "too-many-open-files" in out and "solved 2 of 3" in out
    assert "candidates for new cases: 1 open" in out and "flux capacitor desynchronised" in out
    rc, out, _ = _kb(grow_settings, "stats", "--json")
    stats = json.loads(out)
    assert stats["cases"]["by_area"]["serving"] == len([c for c in load_kb(grow_settings.kb_dir).cases if c.area == "serving"])


def test_kb_add_and_kb_lint_apply_one_rule_to_missing_chinese(grow_settings: Any, tmp_path: Path) -> None:
    """A case `kb add` accepts without Chinese text passes `kb lint` with the same note; --strict-zh refuses it."""
    from bot.cli.main import main

    good = tmp_path / "nofile.yaml"
    good.write_text(NOFILE_CASE_YAML, encoding="utf-8")
    rc, out, err = _kb(grow_settings, "add", "--from-file", str(good))
    assert rc == 0, err
    assert "note: no Chinese text yet for summary_zh, cause_zh, keywords_zh" in out

    def lint(*extra: str) -> tuple[int, str]:
        buf_err = io.StringIO()
        old_err, sys.stderr = sys.stderr, buf_err
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(["kb", "lint", *extra, str(grow_settings.kb_dir)])
        finally:
            sys.stderr = old_err
        return code, buf_err.getvalue()

    rc, err = lint()
    assert rc == 0, err
    assert "note: " in err and "too-many-open-files.yaml" in err and "field 'cause_zh': missing Chinese text" in err
    rc, err = lint("--strict-zh")
    assert rc == 1 and "error: " in err and "too-many-open-files.yaml" in err


def test_cli_add_errors_name_the_file_and_the_field(grow_settings: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(NOFILE_CASE_YAML.replace("'OSError: \\[Errno 24\\] Too many open files'", "'(unclosed'"), encoding="utf-8")
    rc, _, err = _kb(grow_settings, "add", "--from-file", str(bad))
    assert rc == 1 and f"{bad}: field 'signatures'" in err and "bad regex" in err
    healthy = tmp_path / "healthy.yaml"
    healthy.write_text(NOFILE_CASE_YAML.replace("  - 'OSError: \\[Errno 24\\] Too many open files'",
                                                "  - 'OSError: \\[Errno 24\\] Too many open files'\n  - 'detected platform'"), encoding="utf-8")
    rc, _, err = _kb(grow_settings, "add", "--from-file", str(healthy))
    assert rc == 1 and f"{healthy}: field 'signatures'" in err and "healthy start-up log" in err
    assert not list(Path(grow_settings.kb_dir).glob("*/too-many-open-files*.yaml"))


def test_cli_add_interactive(grow_settings: Any) -> None:
    answers = "\n".join([
        *NOFILE_LOG.splitlines(), ".",
        "https://github.com/example-org/vllm-notes/issues/1",
        "",  # accept the suggested title
        "文件描述符耗尽",
        "",  # accept the suggested area
        "high",
        "The soft open-files limit runs out under load and the engine cannot open its sockets.", ".",
        "Raise the open-files limit of the server process.", "$ ulimit -n 65535", ".",
        ".",  # accept the suggested signatures
        "https://github.com/example-org/vllm-notes/issues/2", *NOFILE_LOG_2.splitlines(), ".",
        ".",
    ]) + "\n"
    rc, out, err = _kb(grow_settings, "add", stdin=answers)
    assert rc == 0, out + err
    written = list(Path(grow_settings.kb_dir).glob("*/too-many-open-files.yaml"))
    assert len(written) == 1
    case = load_kb(grow_settings.kb_dir).by_id()["too-many-open-files"]
    assert case.title == "Too many open files" and len(case.examples) == 2 and case.fix[0].command == "ulimit -n 65535"


@pytest.mark.slow
def test_real_cli_entry_point_adds_a_case(grow_settings: Any, tmp_path: Path) -> None:
    case_file = tmp_path / "nofile.yaml"
    case_file.write_text(NOFILE_CASE_YAML, encoding="utf-8")
    env = {**os.environ, "VLLM_DOCTOR_KB_DIR": str(grow_settings.kb_dir), "VLLM_DOCTOR_INDEX_DIR": str(grow_settings.index_dir),
           "VLLM_DOCTOR_KB_DB": str(grow_settings.kb_db_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bot", "kb", "add", "--from-file", str(case_file), "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["id"] == "too-many-open-files" and Path(result["path"]).is_file()


def test_votes_reach_the_running_engine_through_set_priors(growth: Any, engine: Any) -> None:
    distilled, mode, first, second = _close_pair(engine)
    for n in range(20):
        growth.vote(answer_id=f"h{n}", user_id=f"U{n}", value="not_helpful", case_id=first.case_id, verdict="uncertain", channel="C1")
        growth.vote(answer_id=f"i{n}", user_id=f"U{n}", value="fixed", case_id=second.case_id, verdict="uncertain", channel="C1")
    ranked = engine.matcher.match(distilled, mode=mode)[1]  # the engine's own matcher, attached by KBGrowth()
    assert ranked[0].case_id == second.case_id and "prior" in ranked[0].scores
