"""`diagnose --local`: the same catalogue on this machine (no GPU here, a CPU torch in the venv)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runner_support import local_host, run_diagnosis

from bot.settings import Settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def settings(tmp_path):
    return Settings(runner_audit_db=tmp_path / "audit.sqlite3", runner_local_python=sys.executable)


def test_local_run_on_this_machine(settings, monkeypatch, tmp_path):
    secret = "hf_" + "Q7" * 17
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("VLLM_API_KEY", "sk-local-" + "x9" * 12)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    report = run_diagnosis("", settings=settings, local=True)
    [host] = report.hosts
    by_id = {c.id: c for c in host.checks}
    assert host.error is None and len(by_id) == len([c for c in by_id.values() if c.tier == 0])
    # the venv's real torch is a CPU build: the probe imports it in a subprocess and says so
    torch = by_id["python.torch"]
    assert torch.verdict == "warn" and "CPU-only build" in torch.message and "no-gpu-detected" in torch.cases
    assert by_id["python.runtime"].verdict == "ok" and sys.executable in by_id["python.runtime"].message
    assert by_id["env.debug"].verdict == "warn" and "CUDA_LAUNCH_BLOCKING=1" in by_id["env.debug"].message
    assert by_id["env.hf_access"].message.startswith("HF token set in HF_TOKEN")
    for check_id in ("system.os", "system.memory", "system.disk", "env.vars"):
        assert by_id[check_id].verdict in ("ok", "warn"), (check_id, by_id[check_id].message)
    if not any(Path(p, "nvidia-smi").exists() for p in ("/usr/bin", "/usr/local/bin")):
        assert by_id["gpu.driver"].verdict == "skipped" and "nvidia-smi not found" in by_id["gpu.driver"].message
    raw = report.raw_text()
    assert secret not in raw and "x9x9x9" not in raw and secret not in report.to_json()
    assert "HF_TOKEN=[REDACTED:hf-token]" in raw


def test_offline_mode_with_an_empty_cache_fails(settings, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "true")  # "1" would look like the CLI's own default (local.py)
    result = run_diagnosis("", settings=settings, local=True, checks=["env.hf_access"]).hosts[0].checks[0]
    assert result.verdict == "fail" and result.cases == ["hf-offline-no-cache"]
    (tmp_path / "hf" / "hub" / "models--org--tiny").mkdir(parents=True)
    result = run_diagnosis("", settings=settings, local=True, checks=["env.hf_access"]).hosts[0].checks[0]
    assert result.verdict != "fail" and "1 model(s) cached" in result.message


def test_local_host_fields_reach_the_checks(settings, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}" + b" " * 14)  # header only
    host = local_host(settings, model_dir=str(model), serve_port=1)
    report = run_diagnosis("", settings=settings, local=True, hosts=[host], checks=["model.files", "server.port"])
    files = report.hosts[0].check("model.files")
    assert files.verdict == "ok" and "LlamaForCausalLM (llama): 1 safetensors file(s)" in files.message
    (model / "model.safetensors").write_bytes(b"\xff\x00\x00\x00\x00\x00\x00\x00{")  # truncated download
    report = run_diagnosis("", settings=settings, local=True, hosts=[host], checks=["model.files"])
    broken = report.hosts[0].check("model.files")
    assert broken.verdict == "fail" and broken.cases == ["safetensors-corrupt"]


def test_cli_local_json(tmp_path):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "VLLM_DOCTOR_AUDIT_DB": str(tmp_path / "a.db"),
           "VLLM_DOCTOR_LOCAL_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "--json", "--check", "system",
                          "--check", "env", "--raw", str(tmp_path / "raw.txt")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    [host] = data["hosts"]
    assert {c["id"] for c in host["checks"]} >= {"system.os", "system.shm", "env.vars"}
    assert all(set(c) - {"facts"} == {"id", "verdict", "message", "cases", "duration_s"} for c in host["checks"])
    assert "--- system.shm" in (tmp_path / "raw.txt").read_text()
    usage = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "gpu01"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "not both" in usage.stderr


def test_the_doctors_own_env_defaults_do_not_leak_into_local_probes(tmp_path):
    """bot/cli/main.py sets HF_HUB_OFFLINE=1 for itself; `diagnose --local` must report the user's environment."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "VLLM_DOCTOR_AUDIT_DB": str(tmp_path / "a.db")}
    out = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "--json", "--check", "env.hf_access"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    check = json.loads(out.stdout)["hosts"][0]["checks"][0]
    # no token, and no Hub model configured: nothing needs one (issue 28: a healthy host is all green)
    assert "offline" not in check["message"].split(";")[0] and check["verdict"] == "ok", check
    assert check["message"].startswith("no Hugging Face token, none needed"), check
    out = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "--json", "--check", "env.hf_access"],
                         cwd=REPO, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout)["hosts"][0]["checks"][0]["cases"] == ["hf-offline-no-cache"]


def test_cli_report_in_the_chosen_language(tmp_path):
    """`diagnose --lang zh`: headings and the summary in Chinese (check ids and findings stay as they are);
    `--json` names the language; without --lang the report is English."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "VLLM_DOCTOR_AUDIT_DB": str(tmp_path / "a.db"),
           "VLLM_DOCTOR_LOCAL_PYTHON": sys.executable, "COLUMNS": "200"}

    def diagnose(*extra: str) -> subprocess.CompletedProcess:
        out = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--local", "--check", "system.os", *extra],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode in (0, 1), out.stderr
        return out

    zh = diagnose("--lang", "zh").stdout
    assert "检查项" in zh and "知识库案例" in zh and "1 台主机" in zh and "system.os" in zh, zh
    assert "host(s)" not in zh and "KB cases" not in zh
    en = diagnose().stdout
    assert "KB cases" in en and "1 host(s)" in en and "台主机" not in en, en
    assert json.loads(diagnose("--json", "--lang", "zh").stdout)["language"] == "zh"
    assert json.loads(diagnose("--json").stdout)["language"] == "en"
    bad = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--local", "--lang", "fr"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'fr'" in bad.stderr
