"""Upstream report draft: vLLM's bug-template sections, the environment in collect_env's shape, the root
error excerpt, search terms, and no secret from the redaction corpus."""

from __future__ import annotations

import json

import pytest
from test_redact import CORPUS

from bot.models import LogFacts
from bot.report_draft import SECTIONS, collect_env_text, draft, environment_from_host, sections_of
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
