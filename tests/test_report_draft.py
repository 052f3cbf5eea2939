"""Upstream report draft: vLLM's bug-template sections, the environment in collect_env's shape, the root
error excerpt, search terms, and no secret from the redaction corpus."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_redact import CORPUS

from bot.models import LogFacts, LogLine, Root
from bot.present.report_draft import (
    SECTIONS,
    collect_env_text,
    draft,
    environment_from_host,
    mask_identity,
    root_line,
    sections_of,
)
from tests.conftest import EVAL_DIR


def _uncovered_log() -> str:
    for line in (EVAL_DIR / "dev.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["expected"] is None and "Error" in item["log"]:
            return item["log"]
    raise AssertionError("no uncovered log with an error in the eval set")


@pytest.fixture(scope="module")
def secret_log() -> tuple[str, list[str]]:
    single_line = [(t, s) for _n, t, s in CORPUS if "\n" not in t and "\n" not in s]
    lines = [f"INFO 05-01 10:00:{i:02d} api_server.py:123] " + t.replace("{s}", s)
             for i, (t, s) in enumerate(single_line[:30])]
    return "\n".join(lines) + "\n" + _uncovered_log(), [s for _t, s in single_line[:30]]


def test_draft_has_every_template_section_and_no_secret(doctor, secret_log):
    log, secrets = secret_log
    diagnosis = doctor.match(log)
    text = draft(diagnosis, LogFacts(vllm_version="0.6.3.post1", gpu_name="NVIDIA A10G", gpu_count=1),
                 feedback={})
    assert list(sections_of(text)) == list(SECTIONS)
    assert "vLLM Version: 0.6.3.post1" in text and "GPU 0: NVIDIA A10G" in text
    assert "PyTorch version: Could not collect" in text  # unknown stays visibly unknown, as collect_env says
    leaked = [s for s in secrets if s in text]
    assert not leaked, leaked
    root = diagnosis.distilled.root_errors[0].text.strip()
    assert root in text
    assert "repo:vllm-project/vllm" in text


def test_draft_of_a_covered_log_lists_the_kb_suggestion_and_its_feedback(doctor):
    log = (EVAL_DIR.parent.parent / "docs" / "samples" / "kv-cache-oom.log").read_text(encoding="utf-8")
    diagnosis = doctor.match(log)
    best = diagnosis.matches[0].case_id
    text = draft(diagnosis, LogFacts(), feedback={best: "marked \"Didn't help\" by 1 user"})
    assert f"`{best}`" in text and "Didn't help" in text
    assert '"No available memory for the cache blocks' in text or "cache blocks" in text


def test_environment_from_host_facts_in_collect_env_shape():
    facts = {"gpu.driver": {"driver_version": "535.104.05", "cuda_version": "12.2"},
             "python.torch": {"version": "2.4.0+cu121", "cuda": "12.1", "nccl_version": "2.20.5"},
             "python.vllm_install": {"version": "0.6.1"}, "python.runtime": {"version": "3.10.12"},
             "gpu.inventory": {"gpus": ["GPU0 NVIDIA A100-SXM4-80GB (00000000:07:00.0, 81920 MiB)"]}}
    text = collect_env_text(environment_from_host(facts, "gpu07"))
    for line in ("PyTorch version: 2.4.0+cu121", "CUDA used to build PyTorch: 12.1", "Python version: 3.10.12",
                 "Nvidia driver version: 535.104.05", "vLLM Version: 0.6.1", "NCCL version: 2.20.5",
                 "host gpu07"):
        assert line in text, line


# --- issue 25 item 4: a draft worth filing ----------------------------------------------------------------
NFS_LOG = (Path(__file__).parent / "fit_fixtures" / "nfs-stale-handle.log").read_text(encoding="utf-8")
COLLECT_ENV = """\
Collecting environment information...
PyTorch version: 2.7.0+cu126
Is debug build: False
CUDA used to build PyTorch: 12.6
OS: Ubuntu 22.04.4 LTS (x86_64)
Python version: 3.11.9 (main, Apr  6 2024, 17:59:24) [GCC 11.4.0] (64-bit runtime)
Is CUDA available: True
CUDA runtime version: 12.4.131
GPU models and configuration:
GPU 0: NVIDIA A100-SXM4-80GB
GPU 1: NVIDIA A100-SXM4-80GB
Nvidia driver version: 550.54.15
vLLM Version: 0.9.1
"""


@pytest.fixture(scope="module")
def nfs(doctor):
    return doctor.match(NFS_LOG)


def test_nfs_draft_is_titled_and_searched_from_the_oserror_line(nfs):
    text = draft(nfs, nfs.facts or LogFacts())
    assert text.splitlines()[0] == "# [Bug]: OSError: [Errno 116] Stale file handle"
    assert "OSError: [Errno 116] Stale file handle" in text.split("### What vllm-doctor found")[0]
    terms = text.split("### Search terms for existing issues")[1]
    assert terms.strip().splitlines()[0] == '- `"Stale file handle" OSError repo:vllm-project/vllm`'
    assert root_line(nfs) is not None and root_line(nfs).line_no == 22


def test_root_line_prefers_diagnosis_root_when_the_root_stage_set_it(nfs):
    chosen = replace(nfs, root=Root(41, "RuntimeError: Engine core initialization failed.", "other"))
    assert root_line(chosen) == LogLine(41, "RuntimeError: Engine core initialization failed.", "root")


def test_nfs_draft_has_the_launch_command_expected_actual_and_no_user_name(nfs):
    text = draft(nfs, nfs.facts or LogFacts())
    assert ("CUDA_VISIBLE_DEVICES=0,1 vllm serve /home/<user>/models/Llama-3.1-8B-Instruct --tensor-parallel-size 2"
            in text)
    assert "**Expected:**" in text and "**Actual:** it fails at start-up with `OSError: [Errno 116] Stale file " \
        "handle` (line 22)" in text
    assert "alice" not in text and "gpu-node-07" not in text


def test_masking_users_hosts_and_internal_addresses():
    masked = mask_identity("bob@gpu07.corp:~$ ls /home/bob/x /Users/carol/y; curl http://10.2.3.4:8000 "
                           "http://192.168.1.9/ http://node3.cluster.internal:8000 https://github.com/vllm-project")
    assert masked == ("<user>@<host>:~$ ls /home/<user>/x /Users/<user>/y; curl http://<internal-ip>:8000 "
                      "http://<internal-ip>/ http://<host>:8000 https://github.com/vllm-project")


def test_log_versions_win_over_the_host_report_and_both_are_shown(nfs):
    host = environment_from_host({"python.vllm_install": {"version": "0.10.0"},
                                  "python.torch": {"version": "2.7.1+cu126", "cuda": "12.6"},
                                  "system.os": {"PRETTY_NAME": "Ubuntu 22.04.4 LTS"}}, "gpu07")
    text = draft(nfs, nfs.facts or LogFacts(), env=host)
    assert "vLLM Version: 0.9.2" in text  # the log's: the run that failed
    assert "vLLM: 0.9.2 in the log (used above), 0.10.0 on host gpu07" in text
    assert "PyTorch version: 2.7.1+cu126" in text and "OS: Ubuntu 22.04.4 LTS" in text  # the log is silent


def test_collect_env_output_is_the_environment_section(nfs):
    text = draft(nfs, nfs.facts or LogFacts(), collect_env=COLLECT_ENV)
    env = text.split("### Your current environment")[1].split("### 🐛 Describe the bug")[0]
    assert "GPU 1: NVIDIA A100-SXM4-80GB" in env and "Nvidia driver version: 550.54.15" in env
    assert env.index("PyTorch version") < env.index("vLLM Version")  # collect_env's own order
    assert "vLLM: 0.9.2 in the log, 0.9.1 in the collect_env output" in env
    assert list(sections_of(text)) == list(SECTIONS)
