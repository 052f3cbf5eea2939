"""The team-learning loop (issue 26, item 3) on real components: the candidate store on SQLite and on a real
PostgreSQL server, clustering with the real MiniLM encoder of the pipeline, drafts checked against the healthy
start-up logs, `vllm-doctor kb suggest`, and a reviewer accepting a draft (live at once) or being refused."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import REVIEWER

from bot.errors import InvalidCase
from bot.kb_growth import KBGrowth
from bot.kb_growth.candidates import CandidateStore
from bot.kb_growth.clusters import (
    DEFAULT_SIMILARITY,
    Clusters,
    Unknown,
    draft_of,
    literal_chars,
    shape_of,
    slightly_different,
)
from bot.kb_growth.db import Database
from bot.kb_growth.lint import cleaned_lines, healthy_logs

# An unknown failure (no KB case covers it), as two threads would paste it: numbers differ.
PLUGIN_LOG = """\
INFO 05-02 10:00:01 [api_server.py:1043] vLLM API server version 0.8.5
ERROR 05-02 10:01:13 [core.py:396] EngineCore hit an exception: Traceback (most recent call last):
ERROR 05-02 10:01:13 [core.py:396]   File "/opt/plugins/staging.py", line 88, in reserve
ERROR 05-02 10:01:13 [core.py:396]     ring.pin(pages)
ERROR 05-02 10:01:13 [core.py:396] RuntimeError: staging ring of plugin fastpath could not pin {n} pages on numa node {k}
"""
SECRET = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def plugin_log(n: int, k: int) -> str:
    return PLUGIN_LOG.format(n=n, k=k)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "postgresql":
        return Database(request.getfixturevalue("postgres_url"))
    return Database(tmp_path / "kb.sqlite3")


def test_an_unknown_paste_keeps_its_root_line_component_threads_and_versions_redacted(db: Database) -> None:
    store = CandidateStore(db)
    root = f"RuntimeError: staging ring of plugin fastpath could not pin 512 pages token={SECRET}"
    first = store.add(plugin_log(512, 3) + f"token={SECRET}\n", "unknown", channel="C1", answer_id="a1",
                      root_text=root, component="other", thread="C1/1700000000.000100",
                      permalink="https://test.slack.com/archives/C1/p1700000000000100", versions={"vllm": "0.8.5"})
    assert first is not None
    again = store.add(plugin_log(64, 0), "unknown", channel="C2", answer_id="a2", root_text=root,
                      thread="C2/1700000001.000100", permalink="https://test.slack.com/archives/C2/p1700000001000100")
    assert again is not None and again.id == first.id and again.seen == 2  # one failure, folded
    [kept] = store.unknowns()
    assert SECRET not in kept.text and SECRET not in (kept.root_text or "") and "[REDACTED" in (kept.root_text or "")
    assert kept.component == "other"
    assert [t for t, _ in kept.threads] == ["C1/1700000000.000100", "C2/1700000001.000100"]
    assert kept.threads[0][1] == "https://test.slack.com/archives/C1/p1700000000000100"
    # the same thread pasting again is not another thread
    store.add(plugin_log(7, 1), "unknown", thread="C1/1700000000.000100", root_text=root)
    assert len(store.unknowns()[0].threads) == 2


def test_shapes_differ_slightly_only_when_most_words_are_shared() -> None:
    a = shape_of("ValueError: Attempted to assign 6 x 256 = 1536 image tokens to 466 placeholders")
    b = shape_of("InternVL2 infer error:Attempted to assign 7 x 256 = 1792 multimodal tokens to 506 placeholders")
    c = shape_of("RuntimeError: staging ring of plugin fastpath could not pin 512 pages on numa node 3")
    assert a and b and c and a != b
    assert slightly_different(a, b) and not slightly_different(a, c)
    assert shape_of("IndexError: list index out of range") is None  # names no failure of its own
    assert literal_chars(r"FileNotFoundError: \[Errno \d+\] No such file or directory:") < 30


def test_near_root_lines_merge_by_embedding_and_the_draft_fires_on_every_paste(doctor: Any) -> None:
    """Two shapes that differ slightly (a prefix, 'image' vs 'multimodal') join one cluster through the real
    MiniLM encoder at the default similarity; at 0.99 they stay two clusters and nothing is drafted."""
    roots = ["ValueError: Attempted to assign 6 x 256 = 1536 image tokens to 466 placeholders",
             "InternVL2-26B infer error:Attempted to assign 7 x 256 = 1792 multimodal tokens to 506 placeholders"]

    def unknowns() -> list[Unknown]:
        out = []
        for n, root in enumerate(roots):
            shape = shape_of(root)
            assert shape is not None
            out.append(Unknown(n, root, shape, f"thread-{n}", cleaned_lines(root), None, "multimodal"))
        return out

    healthy = healthy_logs(None)
    merged = Clusters(doctor.index.encoder().encode, DEFAULT_SIMILARITY)
    for u in unknowns():
        cluster = merged.add(u)
    draft = draft_of(cluster, min_pastes=2, healthy=healthy, examples=[])
    assert draft is not None and draft.pastes == 2 and draft.threads == 2 and draft.component == "multimodal"
    assert "Attempted to assign" in draft.signature

    apart = Clusters(doctor.index.encoder().encode, 0.99)  # the embeddings decide: not close enough at 0.99
    for u in unknowns():
        cluster = apart.add(u)
    assert len(apart.clusters) == 2 and draft_of(cluster, min_pastes=2, healthy=healthy, examples=[]) is None


def _kb(settings: Any, *argv: str) -> tuple[int, str]:
    from bot.cli.kb import run_kb_command
    from bot.cli.main import build_parser

    args: argparse.Namespace = build_parser().parse_args(["kb", *argv])
    out = io.StringIO()
    return run_kb_command(args, settings, stdin=io.StringIO(""), stdout=out), out.getvalue()


def test_two_threads_draft_a_case_kb_suggest_lists_it_and_accepting_makes_it_live(
    growth: KBGrowth, grow_settings: Any
) -> None:
    diagnosis = growth.pipeline.match(plugin_log(512, 3))
    assert diagnosis.verdict != "match" and diagnosis.root is not None
    growth.note_answer(answer_id="a1", verdict=diagnosis.verdict, evidence=plugin_log(512, 3), channel="C1",
                       root_text=diagnosis.root.text, component=diagnosis.root.component, thread="C1/1.1",
                       permalink="https://test.slack.com/archives/C1/p11")
    growth.note_answer(answer_id="a2", verdict="unknown", evidence=plugin_log(512, 3), channel="C1",
                       root_text=diagnosis.root.text, thread="C1/1.1")
    assert growth.cluster_drafts() == []  # one thread, however often
    rc, out = _kb(grow_settings, "suggest")
    assert rc == 0 and "no drafted case" in out

    growth.note_answer(answer_id="a3", verdict="unknown", evidence=plugin_log(64, 0), channel="C2",
                       root_text="RuntimeError: staging ring of plugin fastpath could not pin 64 pages on numa node 0",
                       thread="C2/2.2", permalink="https://test.slack.com/archives/C2/p22")
    [draft] = growth.cluster_drafts()
    assert draft.threads == 2 and "staging ring of plugin fastpath" in draft.signature
    assert set(draft.links) == {"https://test.slack.com/archives/C1/p11", "https://test.slack.com/archives/C2/p22"}

    rc, out = _kb(grow_settings, "suggest", "--json")
    [row] = json.loads(out)["drafts"]
    assert row["signature"] == draft.signature and row["pastes"] == 2 and row["threads"] == 2
    assert row["triage"] and row["title"].startswith("Staging ring of plugin fastpath")
    rc, text = _kb(grow_settings, "suggest")
    assert rc == 0 and "2 pastes, 2 threads" in text and "https://test.slack.com/archives/C2/p22" in text

    [sub] = growth.propose_drafts()
    assert sub.status == "pending" and sub.case and sub.case["signatures"] == [draft.signature]
    assert growth.propose_drafts() == []  # posted once
    assert growth.cluster_drafts() == [] and len(growth.cluster_drafts(include_posted=True)) == 1
    approval = growth.approve(sub.id, REVIEWER)
    assert approval.applied.live
    assert growth.pipeline.match(plugin_log(9, 9)).best.case_id == approval.applied.written.case.id


def test_accepting_a_draft_that_fires_on_a_healthy_start_up_is_refused_with_the_line(growth: KBGrowth) -> None:
    sub = growth.submissions.create_draft(author_id="vllm-doctor", source_text="x", prefill={})
    bad = {
        "id": "healthy-firing", "title": "Fires on every start-up", "title_zh": "每次启动都触发", "area": "serving",
        "severity": "high", "signatures": ["Available routes are"],
        "cause": "A drafted signature that a reviewer must not accept.", "fix": [{"text": "Nothing to do."}],
        "examples": [{"source": "https://x.test/1", "log": "INFO Available routes are: /v1"},
                     {"source": "https://x.test/2", "log": "INFO Available routes are: /v2"}],
    }
    growth.submissions.stage(sub.id, kind="new", case=bad, target_case=None, report={})
    growth.submissions.submit(sub.id, kind="new")
    with pytest.raises(InvalidCase) as refused:
        growth.approve(sub.id, REVIEWER)
    message = str(refused.value.problems["signatures"])
    assert "healthy start-up log" in message and "Available routes are" in message and ", line " in message
    assert growth.submissions.get_or_raise(sub.id).status == "pending"


def test_votes_and_accepted_cases_become_training_rows_and_bad_rows_are_one_line_each(
    growth: KBGrowth, grow_settings: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from bot.cli.main import main
    from bot.evaluation.evaluate import load_labelled
    from bot.kb_growth.training import training_rows

    kb = growth.pipeline.kb
    case = kb.cases[0]
    log = case.examples[0].log
    growth.vote(answer_id="a1", user_id="U1", value="fixed", case_id=case.id, verdict="match", channel="C1",
                evidence=f"  1  {log.splitlines()[0]}\n  2  token={SECRET}")
    growth.vote(answer_id="a2", user_id="U2", value="not_helpful", case_id=case.id, verdict="match", channel="C1",
                evidence=log)
    growth.vote(answer_id="a3", user_id="U3", value="fixed", case_id="a-deleted-case", verdict="match", channel="C1",
                evidence=log)
    growth.vote(answer_id="a4", user_id="U4", value="fixed", case_id=case.id, verdict="match", channel="C1")
    sub = growth.submissions.create_draft(author_id="U1", source_text="x")
    growth.submissions.stage(sub.id, kind="new", case={"id": "x"}, target_case=None, report={})
    growth.submissions.submit(sub.id, kind="new")
    growth.submissions.claim(sub.id, REVIEWER)
    growth.submissions.finish(sub.id, written_case=case.id, written_path="x.yaml")
    gone = growth.submissions.create_draft(author_id="U1", source_text="x")
    growth.submissions.stage(gone.id, kind="new", case={"id": "y"}, target_case=None, report={})
    growth.submissions.submit(gone.id, kind="new")
    growth.submissions.claim(gone.id, REVIEWER)
    growth.submissions.finish(gone.id, written_case="since-deleted", written_path="y.yaml")

    examples = {c.id: [(ex.source, ex.log) for ex in c.examples] for c in kb.cases}
    found = training_rows(growth.db, set(kb.by_id()), examples)
    by_id = {r["id"]: r for r in found.rows}
    assert by_id["vote-a1-U1"]["expected"] == case.id and SECRET not in by_id["vote-a1-U1"]["log"]
    assert not by_id["vote-a1-U1"]["log"].startswith("  1  ")  # the answer's line numbers are not the log
    assert by_id["vote-a2-U2"]["expected"] is None
    assert len([r for r in found.rows if r["id"].startswith(f"accepted-{sub.id}-")]) == len(case.examples)
    assert len(found.problems) == 3
    assert any("vote a3/U3" in p and "'a-deleted-case'" in p for p in found.problems)
    assert any("vote a4/U4" in p and "empty log" in p for p in found.problems)
    assert any(gone.id in p and "deleted" in p for p in found.problems)
    assert all("\n" not in p for p in found.problems)

    # `vllm-doctor train --with-feedback` reads them beside a small labelled file
    dev = [r for r in load_labelled(Path(__file__).resolve().parents[1] / "eval" / "dev.jsonl")][:30]
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(r) + "\n" for r in dev), encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_KB_DB_PATH", str(grow_settings.kb_db_path))
    monkeypatch.setenv("VLLM_DOCTOR_INDEX_DIR", str(grow_settings.index_dir))
    monkeypatch.setenv("VLLM_DOCTOR_KB_DIR", str(grow_settings.kb_dir))
    out = tmp_path / "ranker.json"
    assert main(["train", str(small), "--with-feedback", "--out", str(out), "--cache", ""]) == 0
    err = capsys.readouterr().err
    assert f"feedback: {len(found.rows)} rows from votes and accepted cases" in err
    assert "feedback: vote a3/U3" in err and "Traceback" not in err
    assert json.loads(out.read_text())["trained_on"]["logs"] >= 30


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_workers_proposing_at_once_post_one_draft(
    backend: str, grow_settings: Any, engine: Any, request: pytest.FixtureRequest
) -> None:
    import threading

    settings = grow_settings
    if backend == "postgresql":
        settings = grow_settings.model_copy(update={"database_url": request.getfixturevalue("postgres_url")})
    growth = KBGrowth(settings, engine)
    for n, (size, node) in enumerate(((512, 3), (64, 0))):
        growth.note_answer(answer_id=f"w{n}", verdict="unknown", evidence=plugin_log(size, node), channel=f"C{n}",
                           root_text=f"RuntimeError: staging ring of plugin fastpath could not pin {size} pages on "
                                     f"numa node {node}", thread=f"C{n}/{n}.1")
    posted: list[Any] = []
    start = threading.Barrier(2)

    def propose() -> None:
        start.wait()
        posted.extend(KBGrowth(settings, engine).propose_drafts())

    workers = [threading.Thread(target=propose) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(posted) == 1 and [s.id for s in growth.submissions.list("pending")] == [posted[0].id]
    assert growth.posted_signatures() == {posted[0].case["signatures"][0]: posted[0].id}
