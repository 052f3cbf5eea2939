"""No secret of the corpus (tests/secret_corpus.py) leaves through the command line: text output, --json,
--jsonl (a real subprocess), nor a log record; and each line's ordinary content does get out, so the test
sees the lines that held the secrets, not an empty answer. The Slack, LLM-prompt and KB-store exits are
covered in tests/slack/test_slack_secrets.py and tests/kb_growth/test_kb_growth_secrets.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from secret_corpus import ORDINARY, chunks, corpus_paste, leaks

import bot.cli.main as cli


def _run_in_process(args: list[str], doctor: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """bot.cli.main with the session pipeline (the CLI code path is the real one; only the pipeline is shared)."""
    monkeypatch.setattr(cli, "_pipeline", lambda: doctor)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("n", range(len(chunks())))
def test_cli_text_and_json_show_the_lines_but_no_secret(n: int, doctor: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    group = chunks()[n]
    log = tmp_path / "crash.log"
    log.write_text(corpus_paste(group), encoding="utf-8")
    caplog.set_level(logging.DEBUG)
    rc, text, _ = _run_in_process(["explain", "--no-llm", str(log)], doctor, monkeypatch)
    assert rc == 0 and leaks(text) == []
    rc, raw, _ = _run_in_process(["explain", "--no-llm", "--json", str(log)], doctor, monkeypatch)
    assert rc == 0 and leaks(raw) == []
    shown = json.dumps(json.loads(raw)["evidence"])
    # every line reached the output (INFO lines are never evidence; the Slack file and the KB store get them)
    assert [s.name for s in group if s.marker not in shown and not s.line.startswith("INFO")] == []
    assert leaks("\n".join(r.getMessage() for r in caplog.records)) == []


@pytest.mark.parametrize("part", range(4))
def test_cli_json_keeps_ordinary_vllm_content_intact(part: int, doctor: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    group = ORDINARY[part::4]  # ≤ 8 lines: every one is kept as evidence
    log = tmp_path / "ordinary.log"
    log.write_text("".join(f"ERROR 12-01 10:02:{i:02d} [x.py:1] {line}\n" for i, line in enumerate(group)), encoding="utf-8")
    rc, raw, _ = _run_in_process(["explain", "--no-llm", "--json", str(log)], doctor, monkeypatch)
    assert rc == 0
    evidence = " ".join(e["text"] for e in json.loads(raw)["evidence"])
    assert "[REDACTED" not in evidence
    # the longest word of each line (the address, digest, UUID, model or request id, path) is there as it was
    longest = [max(line.split(), key=len).strip("',()") for line in group]
    assert [w for w in longest if w not in evidence] == []


def test_cli_jsonl_batch_subprocess_leaks_nothing(doctor: Any, index_dir: Path, tmp_path: Path) -> None:
    _ = doctor.index  # the session index exists: the subprocess reuses it
    src = tmp_path / "batch.jsonl"
    records = [{"id": f"chunk-{n}", "log": corpus_paste(group)} for n, group in enumerate(chunks())]
    src.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), NO_COLOR="1")
    env.pop("VLLM_BASE_URL", None)
    proc = subprocess.run([sys.executable, "-m", "bot", "-v", "explain", "--no-llm", "--jsonl", str(src)],
                          capture_output=True, env=env, timeout=600, check=False)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    objects = [json.loads(line) for line in out.splitlines()]
    assert [o["id"] for o in objects] == [r["id"] for r in records]
    assert all(o["matches"] for o in objects)  # each chunk ends with a known failure
    assert leaks(out) == [] and leaks(err) == []  # stderr holds the -v debug log records


def test_report_draft_and_llm_prompt_hold_no_secret_of_the_corpus(doctor: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.explain.prompt import build_draft

    log = tmp_path / "crash.log"
    for group in chunks():
        log.write_text(corpus_paste(group), encoding="utf-8")
        rc, draft_text, err = _run_in_process(["report-draft", str(log)], doctor, monkeypatch)
        assert rc == 0 and leaks(draft_text) == [], err
        diagnosis = doctor.match(corpus_paste(group))
        cases = [doctor.kb.by_id()[m.case_id] for m in diagnosis.matches[:3]]
        prompt = json.dumps(build_draft(diagnosis, cases, None, "en").messages, ensure_ascii=False)
        assert leaks(prompt) == []
        # the prompt does hold the lines (their request ids), so the check above looked at them
        assert any(s.marker in prompt for s in group)
