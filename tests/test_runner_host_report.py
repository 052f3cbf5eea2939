"""`vllm-doctor diagnose --json` read back (bot.runner.report.load_report) and fed to the explanation:
`vllm-doctor explain LOG --host-report report.json` puts the host's findings into the LLM prompt.

The report comes from a real `diagnose --local` run on this machine; the LLM is the recording fake
OpenAI-compatible server (tests/llm_support.py); the CLI runs as a subprocess like a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_support import FakeOpenAIServer, answer_json, completion

from bot.errors import UserInputError
from bot.models import CheckResult, FleetReport, HostReport
from bot.runner.report import load_report, report_from_dict
from kb.loader import load_kb

CASE = load_kb().by_id()["kv-cache-no-memory"]
FACTS_HEADING = "## Facts collected on the host"


def run_cli(args: list[str], index_dir: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), VLLM_DOCTOR_AUDIT_DB=str(tmp_path / "audit.db"),
                   NO_COLOR="1", **env)
    if "VLLM_BASE_URL" not in env:
        environ.pop("VLLM_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, env=environ, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def built_index(doctor, index_dir: Path) -> Path:
    return index_dir  # the session doctor built it; the CLI reuses it


@pytest.fixture(scope="module")
def local_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`vllm-doctor diagnose --local --json` of this machine (system checks only: fast)."""
    workdir = tmp_path_factory.mktemp("host-report")
    proc = run_cli(["diagnose", "--local", "--json", "--check", "system", "--no-progress"], Path("unused"), workdir)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    path = workdir / "report.json"
    path.write_bytes(proc.stdout)
    return path


def user_prompt(server: FakeOpenAIServer) -> str:
    [request] = server.chat_requests()
    return "\n".join(m["content"] for m in request.body["messages"] if m["role"] == "user")


def test_explain_with_a_host_report_puts_its_facts_in_the_prompt(built_index: Path, local_report: Path,
                                                                  tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(CASE.examples[0].log, encoding="utf-8")
    facts = load_report(local_report).facts_for_prompt().splitlines()
    shm = next(f for f in facts if " system.shm [" in f)

    with FakeOpenAIServer() as server:
        server.chat = completion(answer_json(CASE.id))
        proc = run_cli(["explain", str(log), "--json", "--host-report", str(local_report)], built_index, tmp_path,
                       VLLM_BASE_URL=server.base_url)
        assert proc.returncode == 0, proc.stderr.decode()
        assert json.loads(proc.stdout)["explanation"]["source"] == "llm"
        prompt = user_prompt(server)
    assert FACTS_HEADING in prompt and f"- {shm}" in prompt
    assert "No available memory for the cache blocks" in prompt or CASE.id in prompt

    with FakeOpenAIServer() as server:  # the same log without a report: no host section
        server.chat = completion(answer_json(CASE.id))
        proc = run_cli(["explain", str(log), "--json"], built_index, tmp_path, VLLM_BASE_URL=server.base_url)
        assert proc.returncode == 0, proc.stderr.decode()
        assert FACTS_HEADING not in user_prompt(server) and shm not in user_prompt(server)


def test_a_bad_host_report_is_refused_before_anything_runs(built_index: Path, tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(CASE.examples[0].log, encoding="utf-8")
    not_json = tmp_path / "report.txt"
    not_json.write_text("gpu-01: all good\n", encoding="utf-8")
    with FakeOpenAIServer() as server:
        proc = run_cli(["explain", str(log), "--host-report", str(not_json)], built_index, tmp_path,
                       VLLM_BASE_URL=server.base_url)
        assert not server.requests
    assert proc.returncode == 2 and "is not JSON" in proc.stderr.decode() and "diagnose HOST --json" in proc.stderr.decode()

    proc = run_cli(["explain", str(log), "--no-llm", "--host-report", str(tmp_path / "missing.json")], built_index,
                   tmp_path)
    assert proc.returncode == 2 and "cannot read the host report" in proc.stderr.decode()


def test_host_report_without_the_llm_says_it_is_unused(built_index: Path, local_report: Path, tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(CASE.examples[0].log, encoding="utf-8")
    proc = run_cli(["explain", str(log), "--no-llm", "--host-report", str(local_report)], built_index, tmp_path)
    assert proc.returncode == 0 and "only used by the LLM explanation" in proc.stderr.decode()


def test_report_json_round_trips() -> None:
    report = FleetReport(target="fleet", max_tier=1, duration_s=2.5, hosts=[
        HostReport("gpu-01", checks=[
            CheckResult("gpu.inventory", "GPUs", "ok", "2 × H100", duration_s=0.2),
            CheckResult("system.shm", "shm", "fail", "/dev/shm is only 64 MiB", cases=["dev-shm-too-small"]),
        ]),
        HostReport("gpu-02", error="connection refused", error_kind="HostUnreachable"),
    ])
    back = report_from_dict(json.loads(report.to_json()))
    assert back.to_dict() == report.to_dict()
    assert back.facts_for_prompt() == report.facts_for_prompt()
    assert back.case_ids() == ["dev-shm-too-small"]
    # a group: failures of every host come before any host's ok lines
    assert back.facts_for_prompt().splitlines() == [
        "gpu-01 system.shm [fail]: /dev/shm is only 64 MiB",
        "gpu-02: could not be checked: connection refused",
        "gpu-01 gpu.inventory [ok]: 2 × H100",
    ]


@pytest.mark.parametrize(("data", "problem"), [
    ([], 'no "hosts" list'),
    ({"hosts": "gpu-01"}, 'no "hosts" list'),
    ({"hosts": [{"checks": []}]}, 'hosts[0] has no "host" name'),
    ({"hosts": [{"host": "a", "checks": [{"verdict": "ok"}]}]}, 'hosts[0].checks[0] has no "id"'),
    ({"hosts": [{"host": "a", "checks": [{"id": "x", "verdict": "great"}]}]}, "verdict 'great'"),
    ({"hosts": [{"host": "a", "checks": [{"id": "x", "verdict": "ok", "cases": "c1"}]}]}, '"cases" must be a list'),
])
def test_malformed_reports_name_the_problem(data: object, problem: str) -> None:
    with pytest.raises(UserInputError, match="not a `vllm-doctor diagnose --json` report") as err:
        report_from_dict(data, source="r.json")
    assert problem in str(err.value) and "r.json" in str(err.value)


def test_host_report_versions_reach_the_cli_answer(built_index: Path, tmp_path: Path) -> None:
    """`explain --host-report` reads the host's vLLM version against the cases' fixed_in (bot/diagnosis/versions.py),
    even without the LLM: the aimv2 clash is fixed in 0.10.0 and the host runs 0.9.2."""
    case = load_kb().by_id()["transformers-aimv2-config-clash"]
    report = FleetReport(target="gpu-07", max_tier=1, duration_s=1.0, hosts=[
        HostReport("gpu-07", checks=[CheckResult("python.vllm_install", "vLLM", "ok", "vllm 0.9.2",
                                                 facts={"version": "0.9.2"})]),
    ])
    path = tmp_path / "report.json"
    path.write_text(report.to_json(), encoding="utf-8")
    log = tmp_path / "vllm.log"
    log.write_text(case.examples[1].log, encoding="utf-8")  # the log itself names no version
    proc = run_cli(["explain", str(log), "--no-llm", "--json", "--host-report", str(path)], built_index, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    match = next(m for m in json.loads(proc.stdout)["matches"] if m["case_id"] == case.id)
    assert "fixed in vllm 0.10.0; host gpu-07 has 0.9.2 — upgrading is the fix" in match["notes"]
