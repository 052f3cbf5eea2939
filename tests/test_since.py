"""`explain LOG --since GOOD.log` (issue 25 item 6): what differs between a working run and the failing one,
before the diagnosis; and the CLI surfaces of items 3 and 4 (filled commands in --json, --collect-env)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import built_index, run_cli  # noqa: F401 - the fixture

from bot.diagnosis.facts import read_facts
from bot.diagnosis.since import changes_to_json, what_changed
from bot.present.render import render_since

FIXTURES = Path(__file__).parent / "fit_fixtures"
GOOD = FIXTURES / "healthy-tp8-qwen72b.log"
BAD = FIXTURES / "kv-shortfall-tp8-qwen72b.log"


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def test_changes_in_versions_engine_args_and_memory_with_their_lines() -> None:
    changes = what_changed(read_facts(GOOD.read_text(encoding="utf-8")), read_facts(BAD.read_text(encoding="utf-8")))
    by_name = {c.name: c for c in changes}
    assert [c.group for c in changes] == sorted((c.group for c in changes), key=["versions", "engine", "memory"].index)
    assert (by_name["vllm_version"].before, by_name["vllm_version"].after) == ("0.8.5.post1", "0.9.0.1")
    assert (by_name["gpu_memory_utilization"].before, by_name["gpu_memory_utilization"].after) == ("0.9", "0.45")
    assert by_name["kv_cache_gib"].after_line == _line_of(BAD, "reserved for KV Cache is 0.82GiB")
    # the same in both runs, or stated by one only: not a change
    assert "model" not in by_name and "tensor_parallel_size" not in by_name and "weights_gib" not in by_name
    assert "estimated_max_model_len" not in by_name and "kv_cache_tokens" not in by_name
    text = render_since(changes, "good.log")
    assert text.splitlines()[0] == "What changed since the working run (good.log):"
    assert "vllm_version 0.8.5.post1 → 0.9.0.1" in text


def test_identical_runs_say_nothing_changed() -> None:
    facts = read_facts(GOOD.read_text(encoding="utf-8"))
    assert what_changed(facts, facts) == []
    assert "Nothing the two logs both state differs" in render_since([], "good.log")
    assert changes_to_json([]) == []


@pytest.mark.usefixtures("built_index")
def test_cli_since_json_and_filled_fix(index_dir: Path) -> None:
    proc = run_cli(["explain", "--no-llm", "--json", str(BAD), "--since", str(GOOD)], index_dir)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.decode("utf-8"))
    assert list(out)[0] == "since"
    assert {"group": "versions", "name": "vllm_version", "before": "0.8.5.post1", "after": "0.9.0.1",
            "before_line": 3, "after_line": 3} in out["since"]
    commands = [s["command"] for s in out["fix"] if s["command"]]
    assert commands and all("Qwen/Qwen2.5-72B-Instruct" in c and "--tensor-parallel-size 8" in c for c in commands)
    assert b"Traceback" not in proc.stderr


@pytest.mark.usefixtures("built_index")
def test_cli_report_draft_with_collect_env(index_dir: Path, tmp_path: Path) -> None:
    env = tmp_path / "env.txt"
    env.write_text("PyTorch version: 2.7.0+cu126\nOS: Ubuntu 22.04.4 LTS (x86_64)\nvLLM Version: 0.9.1\n"
                   "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH\n", encoding="utf-8")
    proc = run_cli(["report-draft", str(FIXTURES / "nfs-stale-handle.log"), "--collect-env", str(env)], index_dir)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode("utf-8")
    assert text.startswith("# [Bug]: OSError: [Errno 116] Stale file handle")
    assert "OS: Ubuntu 22.04.4 LTS (x86_64)" in text
    assert "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH" not in text  # redacted at the entry
    assert "alice" not in text
