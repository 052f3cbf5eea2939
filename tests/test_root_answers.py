"""Issue 25 end to end on the real pipeline (real KB, real MiniLM): the root line leads, an uncovered failure
is answered from its root line and component, and a Chinese answer is Chinese."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.cli.main import _batch_answer, diagnosis_to_json
from bot.present.render import render_text

LOGS = Path(__file__).resolve().parent / "logs"
NFS = (LOGS / "nfs_stale_handle.log").read_text(encoding="utf-8")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")


# code inside prose: identifiers (gpu_memory_utilization, kv-cache-no-memory, config.json, model.files) and flags
_CODE_WORD = re.compile(r"--?[A-Za-z][\w-]*|[A-Za-z0-9]+(?:[_.\-][A-Za-z0-9]+)+")


def chinese_letter_share(answer: str, quoted: list[str]) -> float:
    """CJK share of the letters outside quoted log lines and commands: lines of evidence (`L12: …`), command
    lines (`$ …`, `/vllm-diagnose …`), the log's own text wherever the answer quotes it (`quoted`), inline code
    and identifiers (names of cases, components, checks, settings: code, not words to translate)."""
    kept = []
    for line in answer.splitlines():
        body = line.strip()
        if body.startswith(("$ ", "/vllm-diagnose ")) or re.match(r"L\d+: ", body):
            continue
        for text in quoted:
            body = body.replace(text, "")
        body = re.sub(r"\"[^\"]*\"|`[^`]*`", "", body)  # quoted phrases (the search phrase) and inline code
        kept.append(_CODE_WORD.sub("", body))
    text = "\n".join(kept)
    cjk, latin = len(_CJK.findall(text)), len(_LATIN.findall(text))
    return cjk / max(1, cjk + latin)


def test_nfs_stale_handle_is_not_a_match_and_shows_no_redownload_fix(doctor) -> None:
    d = doctor.match(NFS)
    assert d.verdict != "match"
    assert d.root is not None and "Stale file handle" in d.root.text and d.root.component == "model-files"
    assert d.root.line == NFS.splitlines().index(next(ln for ln in NFS.splitlines() if "Stale file handle" in ln)) + 1
    text = render_text(d, doctor, lang="en")
    assert text.splitlines()[1].startswith(f"The error to fix — L{d.root.line}: OSError: [Errno 116] Stale file handle")
    corrupt = doctor.case("safetensors-corrupt")
    for step in corrupt.fix:  # none of the weak candidate's steps is shown as if it applied
        assert step.text not in text
        assert step.command is None or step.command not in text
    assert "Cause:" not in text and "What to check first — model files" in text
    assert 'Search for: "OSError: [Errno 116] Stale file handle"' in text
    assert "--check model.files" in text
    out = diagnosis_to_json(d)
    raised = {"file": "vllm/model_executor/model_loader/weight_utils.py", "line": 460,
              "function": "safetensors_weights_iterator", "log_line": 20}  # the frame right above the OSError
    assert out["root"] == {"line": d.root.line, "text": d.root.text, "component": "model-files", "raised_at": raised}
    assert "raised in: vllm/model_executor/model_loader/weight_utils.py:460, in safetensors_weights_iterator (L20)" \
        in text
    batch = _batch_answer(doctor, 1, json.dumps({"id": "nfs", "log": NFS}).encode())
    assert batch["root"] == out["root"] and set(batch) >= {"id", "verdict", "matches", "facts"}


def test_a_log_answered_in_chinese_is_chinese(doctor) -> None:
    d = doctor.match(NFS)
    text = render_text(d, doctor, lang="zh")
    assert text.splitlines()[1].startswith(f"需要修复的错误 — 第 {d.root.line} 行")
    share = chinese_letter_share(text, [d.root.text, *map(str, d.facts.known().values())])
    assert share >= 0.8, (share, text)
    for english in ("note:", "What the log says", "shared terms", "signature:", "Possibly related"):
        assert english not in text


def test_a_matched_log_answered_in_chinese_is_chinese(doctor) -> None:
    log = ("INFO 04-27 10:11:03 llm_engine.py:70] Initializing an LLM engine with config: model='/m/Qwen-7B'\n"
           "INFO 04-27 10:13:01 llm_engine.py:299] # GPU blocks: 0, # CPU blocks: 512\n"
           "Traceback (most recent call last):\n"
           '  File "/usr/lib/python3/vllm/worker/worker.py", line 493, in raise_if_cache_size_invalid\n'
           "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
           "initializing the engine.\n")
    d = doctor.match(log)
    assert d.verdict == "match" and d.root is not None and d.root.component == "gpu-memory"
    text = render_text(d, doctor, lang="zh")
    case = doctor.case(d.best.case_id)
    commands = [s.command for s in case.fix if s.command]
    quoted = [*log.splitlines(), d.root.text, *commands, *map(str, d.facts.known().values())]
    quoted += [e.why.split(": ", 1)[-1] for m in d.matches for e in m.evidence if e.why.startswith("signature")]
    share = chinese_letter_share(text, sorted(quoted, key=len, reverse=True))
    assert share >= 0.8, (share, text)


@pytest.mark.parametrize(("log", "expect"), [
    ("WARNING 03-14 09:12:13 [config.py:1] Casting torch.bfloat16 to torch.float16.\n"
     "INFO 03-14 09:12:14 [api_server.py:2] Started server process [123]\n", "only INFO and WARNING"),
    ("INFO 03-14 09:12:14 [api_server.py:2] Started server process [123]\nhello\n", "no error line"),
    ("Traceback (most recent call last):\n  File \"/x/vllm/engine.py\", line 3, in run\n    self.load()\n",
     "ends inside a traceback"),
])
def test_no_root_line_is_said_with_the_reason(doctor, log: str, expect: str) -> None:
    d = doctor.match(log)
    assert d.root is None
    text = render_text(d, doctor, lang="en")
    assert expect in text.splitlines()[1]
    assert diagnosis_to_json(d)["root"] is None


def test_two_failures_and_a_huge_root_line_are_answered_in_full(doctor) -> None:
    huge = "ValueError: bad rope_scaling " + "{'factor': 8.0} " * 800
    log = f"INFO 03-14 09:12:14 [api_server.py:2] start\n{huge}\nOSError: [Errno 98] Address already in use\n"
    d = doctor.match(log)
    assert d.root is not None and d.root.line == 2 and d.root.text == huge.strip() and len(huge) > 10_000
    text = render_text(d, doctor, lang="en")
    assert "more characters]" in text.splitlines()[1]
    assert "a second failure follows — L3: OSError: [Errno 98] Address already in use (serving-api)" in text
    assert diagnosis_to_json(d)["root"]["text"] == huge.strip()
