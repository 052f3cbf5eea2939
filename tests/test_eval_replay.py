"""The team-learning loop replayed (bot/evaluation/eval_replay.py, `vllm-doctor eval FILE --replay`) on real logs."""

from __future__ import annotations

import json
from pathlib import Path

from bot.cli.main import main
from bot.diagnosis.match import SignatureScanner
from bot.evaluation.eval_replay import MIN_DRAFT_LITERAL, _literal, _root_line, replay
from bot.evaluation.evaluate import load_labelled
from bot.kb_growth.suggest import generalise

DEV = Path(__file__).resolve().parent / "eval" / "dev.jsonl"


def _uncovered_with_a_root_line(doctor, n: int) -> list[dict]:
    out = []
    scanner = SignatureScanner(doctor.kb.cases)
    for row in load_labelled(DEV):
        if row["expected"]:
            continue
        root = _root_line(doctor.distil(row["log"])[0], scanner)
        shape = generalise(root) if root else None
        if shape is not None and _literal(shape) >= MIN_DRAFT_LITERAL:
            out.append(row)
        if len(out) == n:
            return out
    return out


def test_the_same_unknown_failure_from_two_threads_becomes_one_draft_answering_the_third(doctor) -> None:
    row = _uncovered_with_a_root_line(doctor, 1)[0]
    rows = [{**row, "id": f"copy-{i}", "source": f"https://github.com/o/r/issues/{i}", "label": "same"}
            for i in range(3)]
    result = replay(doctor, rows)
    assert len(result.drafts) == 1
    assert result.drafts[0].logs == [0, 1]  # drafted when the second thread pasted it
    assert result.purity() == 1.0 and result.false_drafts == 0
    assert result.answered_after == result.answered_before + 1  # the third paste is answered by the draft


def test_one_thread_pasting_twice_drafts_nothing(doctor) -> None:
    row = _uncovered_with_a_root_line(doctor, 1)[0]
    rows = [{**row, "id": f"copy-{i}", "source": "https://github.com/o/r/issues/1"} for i in range(2)]
    assert replay(doctor, rows).drafts == []


def test_a_draft_firing_on_a_log_of_another_label_is_a_false_draft(doctor) -> None:
    row = _uncovered_with_a_root_line(doctor, 1)[0]
    rows = [{**row, "id": f"c{i}", "source": f"https://x/{i}", "label": "a" if i < 2 else "b"} for i in range(3)]
    result = replay(doctor, rows)
    assert len(result.drafts) == 1 and result.false_drafts == 1


def test_replay_cli_prints_the_figures_as_the_last_line(doctor, settings, tmp_path, capsys, monkeypatch) -> None:
    rows = _uncovered_with_a_root_line(doctor, 2)
    path = tmp_path / "replay.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_INDEX_DIR", str(settings.index_dir))
    monkeypatch.setenv("VLLM_DOCTOR_KB_DB_PATH", str(settings.kb_db_path))
    assert main(["eval", str(path), "--replay", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"drafts", "purity", "answered_before", "answered_after", "false_drafts"} <= set(last)
    assert last["logs"] == 2


def test_a_generic_exception_line_is_never_a_draft(doctor) -> None:
    assert _literal(r"IndexError: list index out of range") < MIN_DRAFT_LITERAL
    assert _literal(r"FileNotFoundError: \[Errno \d+\] No such file or directory:") < MIN_DRAFT_LITERAL
    log = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nIndexError: list index out of range\n'
    rows = [{"id": f"g{i}", "log": log, "expected": None, "source": f"https://x/{i}"} for i in range(3)]
    assert replay(doctor, rows).drafts == []


def test_hold_out_cases_replays_a_covered_failure_as_one_the_kb_does_not_know(doctor) -> None:
    """Leave-cases-out: with its case removed from the KB, a covered log pasted in two threads is drafted and
    the third paste is answered by the draft; with the case in the KB it is answered and nothing is drafted."""
    from bot.evaluation.eval_replay import without_cases
    from bot.kb_growth.clusters import cluster_root, shape_of

    for row in load_labelled(DEV):
        case = row["expected"]
        if not case:
            continue
        scanner = SignatureScanner(without_cases(doctor.kb, frozenset({case})).cases)
        if shape_of(cluster_root(doctor.distil(row["log"])[0], scanner)):
            break
    rows = [{**row, "id": f"h{i}", "source": f"https://github.com/o/r/issues/{i}"} for i in range(3)]
    held = replay(doctor, rows, hold_out=frozenset({case}))
    assert len(held.drafts) == 1 and held.drafts[0].logs == [0, 1] and held.false_drafts == 0
    assert held.answered_before == 0 and held.answered_after == 1
    kept = replay(doctor, rows)
    assert kept.drafts == [] and kept.answered_before == 3 and kept.answered_after == 3
