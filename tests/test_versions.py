"""Versions (issue 9, item 4): a case's `fixed_in` / `affects` read against the versions the log prints or a
host diagnosed in the same Slack thread has. Real case files, real engine (MiniLM + FAISS + BM25)."""

from __future__ import annotations

from pathlib import Path

from bot.cli.main import diagnosis_to_json
from bot.diagnosis.versions import check_case, known_versions
from bot.models import Language, LogFacts, Note
from bot.present.i18n import note_text
from bot.runner.report import CheckResult, DiagnosisReport, HostReport
from bot.slack.store import SlackStateDB
from bot.slack.thread_facts import ThreadFacts, ThreadHostFacts
from kb.loader import load_kb

CASE = "transformers-aimv2-config-clash"  # fixed_in {vllm: 0.10.0}: vLLM PR 20921
KB = load_kb()
EXAMPLE = KB.by_id()[CASE].examples[1].log  # no version in it


def said(note: Note | None, lang: Language = "en") -> str:
    """A note as the edges word it (ranking returns values: bot.models.Note)."""
    return note_text(note, lang) if note is not None else ""


def with_version(version: str, text: str = EXAMPLE) -> str:
    return f"INFO 07-25 12:00:00 api_server.py:219] vLLM API server version {version}\n" + text


def best_and(doctor, log: str, **kw):
    d = doctor.match(log, **kw)
    return d, next(m for m in d.matches if m.case_id == CASE)


def test_a_real_case_says_upgrading_is_the_fix_and_is_ranked_down_once_fixed(doctor) -> None:
    old, old_match = best_and(doctor, with_version("0.9.2"))
    assert old.best is not None and old.best.case_id == CASE and old.verdict == "match"
    assert old_match.notes == (Note("upgrade", package="vllm", version="0.10.0", shown="0.9.2"),)
    assert said(old_match.notes[0]) == "fixed in vllm 0.10.0; this log shows 0.9.2 — upgrading is the fix"
    assert "fixed_version" not in old_match.scores

    new, new_match = best_and(doctor, with_version("0.10.1"))
    assert any("this log shows 0.10.1, which already has the fix" in said(n) for n in new_match.notes)
    assert new_match.scores["fixed_version"] < 0 and new_match.score < old_match.score
    # the note reaches every exit that shows match notes (CLI text, --json, Slack render Match.notes)
    assert not any(n.kind == "upgrade" for n in new_match.notes)


def test_no_version_known_no_note_and_no_rank_down(doctor) -> None:
    d, m = best_and(doctor, EXAMPLE)
    assert not any(n.kind in ("upgrade", "already_fixed") for n in m.notes) and "fixed_version" not in m.scores
    _, shown_old = best_and(doctor, with_version("0.9.2"))
    assert m.score == shown_old.score  # an older version shown costs nothing either
    assert check_case({}, {"vllm": "0.10.0"}, known_versions(None)).note is None
    assert check_case({}, {"vllm": "0.10.0"}, known_versions(LogFacts(vllm_version="not-a-version"))).note is None


def test_a_chinese_paste_gets_the_chinese_note(doctor) -> None:
    asked = "升级以后 vllm 一启动就报错，这是怎么回事？请帮忙看看\n" + with_version("0.9.2")
    d, m = best_and(doctor, asked)
    assert d.distilled.language == "zh"
    # the note is a value; the JSON edge words it in the paste's language
    shown = next(j for j in diagnosis_to_json(d)["matches"] if j["case_id"] == CASE)
    assert "已在 vllm 0.10.0 中修复；这段日志显示的是 0.9.2 — 升级即可解决" in shown["notes"]
    assert said(m.notes[0]) == "fixed in vllm 0.10.0; this log shows 0.9.2 — upgrading is the fix"


def test_host_versions_reach_the_answer_and_the_log_wins_over_the_host(doctor) -> None:
    _, m = best_and(doctor, EXAMPLE, host_versions={"vllm": "0.9.2"}, host_label="gpu-01")
    assert Note("upgrade", package="vllm", version="0.10.0", shown="0.9.2", source="host", host="gpu-01") in m.notes
    assert "fixed in vllm 0.10.0; host gpu-01 has 0.9.2 — upgrading is the fix" in map(said, m.notes)
    _, fixed = best_and(doctor, EXAMPLE, host_versions={"vllm": "0.10.0"}, host_label="gpu-01")
    assert fixed.scores["fixed_version"] < 0
    # the log is the run that failed: its version wins over what the host has now
    _, log_first = best_and(doctor, with_version("0.9.2"), host_versions={"vllm": "0.10.0"}, host_label="gpu-01")
    assert "fixed in vllm 0.10.0; this log shows 0.9.2 — upgrading is the fix" in map(said, log_first.notes)
    zh = check_case({}, {"vllm": "0.10.0"}, known_versions(None, {"vllm": "0.9.2"}, "gpu-01"))
    assert said(zh.note, "zh") == "已在 vllm 0.10.0 中修复；主机 gpu-01 上是 0.9.2 — 升级即可解决" and not zh.superseded


def test_affects_range_on_the_real_gemma2_case() -> None:
    # affects {vllm: ">=0.5.1,<0.5.4"}, fixed_in {vllm: "0.5.4"} (PR 7022; read from the released wheels)
    case = KB.by_id()["gemma2-softcap-needs-flashinfer"]
    inside = check_case(case.affects, {}, known_versions(LogFacts(vllm_version="0.5.3.post1")))
    assert said(inside.note) == "known in vllm >=0.5.1,<0.5.4; this log shows 0.5.3.post1, inside that range"
    assert not inside.superseded
    outside = check_case(case.affects, {}, known_versions(LogFacts(vllm_version="0.6.4")))
    assert outside.superseded and "outside that range" in said(outside.note)
    # with both fields, fixed_in speaks first: it says what to do
    both = check_case(case.affects, case.fixed_in, known_versions(LogFacts(vllm_version="0.5.3.post1")))
    assert said(both.note) == "fixed in vllm 0.5.4; this log shows 0.5.3.post1 — upgrading is the fix"
    assert not both.superseded


def _host(name: str, vllm: str, torch: str) -> HostReport:
    return HostReport(host=name, checks=[
        CheckResult(id="python.vllm_install", title="vLLM install", verdict="ok", message=f"vllm {vllm}",
                    facts={"installed": True, "version": vllm}),
        CheckResult(id="python.torch", title="torch", verdict="ok", message=f"torch {torch}",
                    facts={"version": torch, "cuda": "12.4"}),
        CheckResult(id="gpu.driver", title="driver", verdict="ok", message="550.54.15",
                    facts={"driver_version": "550.54.15"}),
    ])


def test_a_host_diagnosis_keeps_its_versions_across_a_restart(tmp_path: Path) -> None:
    report = DiagnosisReport(target="gpu-01", hosts=[_host("gpu-01", "0.9.2", "2.7.0")])
    facts = ThreadHostFacts.from_report("C1", "1700000900.000100", report)
    assert facts is not None
    assert facts.versions == {"vllm": "0.9.2", "torch": "2.7.0", "cuda": "12.4", "driver": "550.54.15"}
    path = tmp_path / "state.sqlite3"
    ThreadFacts(store=SlackStateDB(path, retention_s=86400.0)).remember(facts)
    restarted = ThreadFacts(store=SlackStateDB(path, retention_s=86400.0), clock=lambda: facts.created + 60)
    loaded = restarted.lookup("C1", "1700000900.000100")
    assert loaded is not None and loaded.versions == facts.versions

    # a group: only the versions every checked host agrees on (two vLLM versions say nothing)
    group = DiagnosisReport(target="pool", hosts=[_host("a", "0.9.2", "2.7.0"), _host("b", "0.10.1", "2.7.0"),
                                                  HostReport(host="c", error="connection refused")])
    agreed = ThreadHostFacts.from_report("C1", "1.2", group)
    assert agreed is not None and "vllm" not in agreed.versions and agreed.versions["torch"] == "2.7.0"
