"""KB-growth storage without the engine: SQLite feedback/candidates/submissions, the case writer, YAML
round trips over the whole bundled KB, form parsing, signature suggestions and the optional git commit."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from kb_growth_support import widget_case_data

from bot.diagnosis.distill import distill
from bot.diagnosis.match import MAX_PRIOR, SignatureScanner
from bot.errors import InvalidCase, ReviewConflict
from bot.kb_growth.candidates import CandidateStore
from bot.kb_growth.caseyaml import parse_case_text, render_case
from bot.kb_growth.db import Database
from bot.kb_growth.feedback import FeedbackStore, prior_from_counts
from bot.kb_growth.form import CaseForm, case_to_form, form_to_case
from bot.kb_growth.gitcommit import author_string, commit_file
from bot.kb_growth.lint import healthy_logs, lint_case
from bot.kb_growth.submissions import SubmissionStore
from bot.kb_growth.suggest import generalise, suggest_signatures, suggest_title
from bot.kb_growth.writer import CaseWriter
from kb.loader import KBError, load_kb
from kb.schema import Case

KB = load_kb()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    """The same store tests on both backends of bot/storage."""
    if request.param == "postgresql":
        return Database(request.getfixturevalue("postgres_url"))
    return Database(tmp_path / "kb.sqlite3")


# -- feedback ------------------------------------------------------------------------------------------------


def test_database_is_in_wal_mode(tmp_path: Path) -> None:
    db = Database(tmp_path / "kb.sqlite3")
    FeedbackStore(db).totals()
    mode = sqlite3.connect(db.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_one_vote_per_user_per_answer_and_a_revote_replaces_it(db: Database) -> None:
    store = FeedbackStore(db)
    first = store.vote(answer_id="a1", user_id="U1", value="fixed", case_id="kv-cache-no-memory", verdict="match", channel="C1")
    assert first.previous is None and first.outcome.text() == "solved 1 of 1"
    again = store.vote(answer_id="a1", user_id="U1", value="not_helpful", case_id="kv-cache-no-memory", verdict="match", channel="C1")
    assert again.previous == "fixed"
    assert again.outcome.text() == "solved 0 of 1"
    with db.read() as conn:
        rows = conn.execute("SELECT answer_id, user_id, case_id, channel, value, created_at FROM votes").fetchall()
    assert [tuple(r)[:5] for r in rows] == [("a1", "U1", "kv-cache-no-memory", "C1", "not_helpful")]
    assert rows[0]["created_at"] > 0


def test_outcome_counts_people_and_one_user_flooding_votes_counts_once(db: Database) -> None:
    store = FeedbackStore(db)
    for n in range(10):  # ten people, nine say it fixed it
        store.vote(answer_id=f"a{n}", user_id=f"U{n}", value="fixed" if n < 9 else "not_helpful",
                   case_id="case-a", verdict="match", channel="C1")
    assert store.outcome_text("case-a") == "solved 9 of 10"
    for n in range(200):  # one user floods "Didn't help" on 200 answers naming case-a
        store.vote(answer_id=f"flood{n}", user_id="U9", value="not_helpful", case_id="case-a", verdict="match", channel="C2")
    assert store.outcome("case-a").text() == "solved 9 of 10"
    for n in range(200):  # …and "Fixed it" on 200 answers naming case-b
        store.vote(answer_id=f"boost{n}", user_id="UFLOOD", value="fixed", case_id="case-b", verdict="match", channel="C2")
    assert store.outcome("case-b").text() == "solved 1 of 1"
    priors = store.priors()
    assert priors["case-b"] == pytest.approx(prior_from_counts(1, 1)) == pytest.approx(MAX_PRIOR / 3)
    assert 0 < priors["case-a"] < MAX_PRIOR
    assert priors.get("never-voted") == 0.0 and "never-voted" not in priors


def test_prior_is_bounded_and_signed() -> None:
    assert prior_from_counts(0, 0) == 0.0
    assert prior_from_counts(10_000, 10_000) < MAX_PRIOR
    assert prior_from_counts(0, 10_000) > -MAX_PRIOR
    assert prior_from_counts(0, 3) < 0 < prior_from_counts(3, 3)
    assert prior_from_counts(5, 10) == pytest.approx(0.0)


# -- candidates ----------------------------------------------------------------------------------------------


def test_candidates_are_redacted_folded_and_resolved_by_a_new_case(db: Database) -> None:
    store = CandidateStore(db)
    token = "hf_" + "a1B2c3D4e5" * 4
    log1 = f"ERROR 05-02 10:01:13 [core.py:1] OSError: [Errno 24] Too many open files: '/tmp/a1'\nHF_TOKEN={token}\n"
    log2 = f"ERROR 06-03 11:02:14 [core.py:9] OSError: [Errno 24] Too many open files: '/tmp/b7'\nHF_TOKEN={token}\n"
    store.add(log1, "unknown", channel="C1", user_id="U1", answer_id="a1")
    again = store.add(log2, "not_helpful", case_id="port-in-use", channel="C2", user_id="U2", answer_id="a2")
    assert again.seen == 2 and again.reason == "not_helpful" and again.case_id == "port-in-use"
    with db.read() as conn:
        stored = "\n".join(" ".join(map(str, r)) for r in conn.execute("SELECT * FROM candidates"))
    assert token not in stored and "[REDACTED:" in stored
    assert store.counts() == {"open": 1, "resolved": 0, "unknown": 0, "not_helpful": 1}
    case = Case.model_validate(widget_case_data(1) | {"signatures": [r"Too many open files"], "examples": [
        {"source": "https://example.invalid/1", "log": "OSError: [Errno 24] Too many open files: 'x'\n"},
        {"source": "https://example.invalid/2", "log": "OSError: [Errno 24] Too many open files: 'y'\n"}],
        "references": ["https://example.invalid/1", "https://example.invalid/2"]})
    assert store.resolve_with(case) == 1
    assert store.open() == [] and store.counts()["resolved"] == 1


# -- submissions -----------------------------------------------------------------------------------------------


def test_submission_state_machine_allows_exactly_one_decision(db: Database) -> None:
    subs = SubmissionStore(db)
    sub = subs.create_draft(author_id="U1", author_name="alice", channel="C1", message_ts="1.2", source_text="log")
    with pytest.raises(ReviewConflict):
        subs.submit(sub.id)  # nothing staged yet
    subs.stage(sub.id, kind="new", case=widget_case_data(1), target_case=None, report={})
    assert subs.submit(sub.id).status == "pending"
    winners: list[str] = []
    losers: list[str] = []

    def click(reviewer: str) -> None:
        try:
            subs.claim(sub.id, reviewer)
            winners.append(reviewer)
        except ReviewConflict as exc:
            losers.append(str(exc))

    threads = [threading.Thread(target=click, args=(f"UR{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert all("already being approved" in msg for msg in losers)
    subs.finish(sub.id, written_case="widget-fault-001", written_path="/x")
    with pytest.raises(ReviewConflict, match="already approved by " + winners[0]):
        subs.reject(sub.id, "UR9")


def test_interrupted_approval_goes_back_to_pending(db: Database) -> None:
    subs = SubmissionStore(db)
    sub = subs.create_draft(author_id="U1")
    subs.stage(sub.id, kind="new", case=widget_case_data(2), target_case=None, report={})
    subs.submit(sub.id)
    subs.claim(sub.id, "UR1")  # …and the process dies here
    assert subs.recover(older_than_s=0) == 1
    assert subs.get(sub.id).status == "pending" and subs.get(sub.id).reviewer_id is None


# -- YAML and the writer -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", KB.cases, ids=[c.id for c in KB.cases])
def test_every_bundled_case_round_trips_through_the_writer_format(case: Case) -> None:
    text = render_case(case)
    again = parse_case_text(text, f"{case.id}.yaml")
    assert again.model_dump(exclude={"examples"}) == case.model_dump(exclude={"examples"})
    assert [e.log.strip() for e in again.examples] == [e.log.strip() for e in case.examples]


def test_parse_errors_name_the_file_and_the_field_or_line(tmp_path: Path) -> None:
    bad_regex = yaml.safe_dump(widget_case_data(3) | {"signatures": ["unclosed (group"]})
    with pytest.raises(KBError) as exc:
        parse_case_text(bad_regex, "case.yaml")
    assert exc.value.path == "case.yaml" and "field 'signatures'" in str(exc.value) and "bad regex" in str(exc.value)
    with pytest.raises(KBError, match=r"case\.yaml: line 3, column \d+: YAML syntax error"):
        parse_case_text("id: x\ntitle: y\n  bad: [indent\n", "case.yaml")
    with pytest.raises(KBError, match="field 'severtiy': unknown field"):
        parse_case_text(yaml.safe_dump(widget_case_data(3) | {"severtiy": "low"}), "case.yaml")


def test_twenty_concurrent_writes_of_one_id_make_twenty_files(tmp_path: Path) -> None:
    writer = CaseWriter(tmp_path / "cases")
    results = []
    errors = []

    def add(n: int) -> None:
        try:
            data = widget_case_data(n, case_id="widget-fault")
            results.append(writer.add(Case.model_validate(data)))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = sorted(r.case.id for r in results)
    assert ids == sorted(["widget-fault"] + [f"widget-fault-{n}" for n in range(2, 21)])
    assert all(r.requested_id == "widget-fault" for r in results)
    kb = load_kb(tmp_path / "cases")  # strict: every file valid, id == stem
    assert sorted(c.id for c in kb.cases) == ids
    titles = {c.title for c in kb.cases}
    assert len(titles) == 20  # no write overwrote another
    assert not list((tmp_path / "cases").rglob("*.tmp"))


_WRITER_PROCESS = """
import sys
from bot.kb_growth.writer import CaseWriter
from kb.schema import Case
sys.path.insert(0, sys.argv[3])
from kb_growth_support import widget_case_data
writer = CaseWriter(sys.argv[1])
for n in range(5):
    writer.add(Case.model_validate(widget_case_data(int(sys.argv[2]) * 10 + n, case_id="widget-fault")))
"""


def test_four_processes_writing_the_same_id_make_twenty_files(tmp_path: Path) -> None:
    import sys

    cases = tmp_path / "cases"
    here = str(Path(__file__).resolve().parent)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER_PROCESS, str(cases), str(p), here]) for p in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    kb = load_kb(cases)
    assert len(kb.cases) == 20 and len({c.title for c in kb.cases}) == 20
    assert {c.id for c in kb.cases} == {"widget-fault", *(f"widget-fault-{n}" for n in range(2, 21))}


# -- forms, lint, suggestions --------------------------------------------------------------------------------------


def test_form_errors_are_reported_per_field() -> None:
    form = CaseForm(title="ok title", title_zh="标题", area="nowhere", severity="high", cause="too short",
                    fix="$ orphan command", signatures="fine\n(unclosed",
                    examples="not a url\nsome log line here")
    with pytest.raises(InvalidCase) as exc:
        form_to_case(form)
    problems = exc.value.problems
    assert set(problems) >= {"area", "cause", "fix", "signatures", "examples"}
    assert "bad regex" in problems["signatures"] and "URL" in problems["examples"]
    one = CaseForm(**{**case_to_form(KB.by_id()["kv-cache-no-memory"]).as_dict(), "examples":
                      "https://example.invalid/1\nValueError: No available memory for the cache blocks."})
    with pytest.raises(InvalidCase) as exc:
        form_to_case(one)
    assert "at least two" in exc.value.problems["examples"]


def test_form_round_trip_of_a_real_case() -> None:
    case = KB.by_id()["kv-cache-no-memory"]
    again = form_to_case(case_to_form(case))
    # Fact rules, frame fingerprints and the Chinese text are written in YAML, not in the Slack form (a case
    # filed from Slack may leave the Chinese empty; the review message says so).
    skip = {"examples", "cause", "references", "rules", "frames", "summary_zh", "cause_zh", "keywords_zh"}

    def comparable(c: Case) -> dict:
        data = c.model_dump(exclude=skip)
        for step in data["fix"]:
            step.pop("text_zh")
        return data

    assert comparable(again) == comparable(case)
    assert sorted(again.references) == sorted(case.references)
    assert " ".join(again.cause.split()) == " ".join(case.cause.split())


def test_lint_rejects_signatures_that_fire_on_healthy_logs_or_miss_examples() -> None:
    healthy = healthy_logs(None)
    assert healthy, "tests/eval/healthy/*.log must exist"
    broad = Case.model_validate(widget_case_data(4) | {"signatures": [r"WidgetFault004", r"INFO"]})
    report = lint_case(broad, healthy=healthy)
    assert any(p.field == "signatures" and "'INFO'" in p.message and "healthy" in p.message for p in report.errors)
    missing = Case.model_validate(widget_case_data(5) | {"signatures": [r"never appears anywhere"]})
    report = lint_case(missing, healthy=healthy)
    assert [p.field for p in report.errors] == ["examples", "examples"]
    overlapping = Case.model_validate(widget_case_data(6) | {
        "signatures": [r"WidgetFault006", r"No available memory for the cache blocks"]})
    report = lint_case(overlapping, healthy=healthy, others=KB.cases)
    assert report.ok and "kv-cache-no-memory" in report.overlaps


def test_generalise_keeps_words_and_generalises_numbers_paths_hex() -> None:
    line = "OSError: [Errno 24] Too many open files: '/tmp/vllm-ipc/4f1c2a9b-socket' at 0x7f3a2c001e80"
    pattern = generalise(line)
    assert pattern is not None and "Too many open files" in pattern and "24" not in pattern
    import re

    assert re.search(pattern, line)
    assert re.search(pattern, "OSError: [Errno 23] Too many open files: '/other/path' at 0x1")
    assert generalise("error 12 34") is None  # too little literal text to be a fingerprint


def test_suggested_signatures_for_every_bundled_example_hit_it_and_spare_healthy_logs() -> None:
    healthy = healthy_logs(None)
    examples = [(c, e) for c in KB.cases for e in c.examples]
    with_suggestion = 0
    for case, example in examples:
        suggestions = suggest_signatures(example.log, healthy=healthy)
        with_suggestion += bool(suggestions)
        for s in suggestions:
            probe = Case.model_construct(id="probe", signatures=[s.pattern])
            assert SignatureScanner([probe]).scan(distill(example.log).cleaned), (case.id, s.pattern)
            for name, lines in healthy:
                assert not SignatureScanner([probe]).scan(lines), (case.id, s.pattern, name)
    assert with_suggestion / len(examples) >= 0.8, f"only {with_suggestion}/{len(examples)} examples got a suggestion"


def test_suggested_title_drops_the_exception_class_and_variable_tail() -> None:
    assert suggest_title(distill("OSError: [Errno 24] Too many open files: '/tmp/x'")) == "Too many open files"
    title = suggest_title(distill("ValueError: No available memory for the cache blocks. Try increasing it."))
    assert title == "No available memory for the cache blocks"


# -- git ---------------------------------------------------------------------------------------------------------


def test_commit_file_commits_only_that_file_with_the_author(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    run("config", "user.name", "Maintainer")
    run("config", "user.email", "maintainer@example.invalid")
    (repo / "other.txt").write_text("staged but not ours\n")
    run("add", "other.txt")
    case_file = repo / "kb" / "cases" / "hardware" / "widget-fault-001.yaml"
    case_file.parent.mkdir(parents=True)
    case_file.write_text(render_case(Case.model_validate(widget_case_data(1))))
    author = author_string("Alice $(rm -rf ~)\n<evil>", "U0ALICE1")
    assert "\n" not in author and author.endswith("<U0ALICE1@slack.invalid>")
    result = commit_file(case_file, "kb: add widget-fault-001", author)
    assert result.ok, result.detail
    shown = run("log", "-1", "--format=%an|%ae|%s", "--name-only").stdout
    assert shown.startswith("Alice $(rm -rf ~)evil|U0ALICE1@slack.invalid|kb: add widget-fault-001")
    assert "kb/cases/hardware/widget-fault-001.yaml" in shown and "other.txt" not in shown
    assert "other.txt" in run("diff", "--cached", "--name-only").stdout  # still staged, untouched
    assert not commit_file(tmp_path / "outside.yaml", "x").ok  # not a checkout: reported, not raised
