"""Server probes (/health, /v1/models, /metrics, port, process) against the REAL vLLM CPU server, locally
and through sshd, plus the /metrics rules on a recorded busy server.

The real-server tests need the session fixture `vllm_server` (tests/vllm_support.py, registered in
tests/conftest.py) and are marked `vllm`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_support import local_host, run_diagnosis

from bot.runner.catalogue import load_catalogue
from bot.runner.engine import command_for, judge
from bot.runner.inventory import Host
from bot.runner.transport import CommandResult
from bot.settings import Settings

FIX = Path(__file__).resolve().parent / "runner_fixtures"


def _metrics_verdict(body: str, status: int = 200):
    catalogue = load_catalogue()
    check = catalogue.checks["server.metrics"]
    host = Host(name="h", endpoint="http://127.0.0.1:8000")
    out = json.dumps({"url": "http://127.0.0.1:8000/metrics", "status": status, "body": body})
    result, _ = judge(check, command_for(check, host, catalogue), CommandResult(0, out, "", 0.01), host)
    return result


def test_metrics_rules_on_a_saturated_server():
    busy = (FIX / "metrics" / "vllm-cpu-busy.txt").read_text()
    result = _metrics_verdict(busy)
    assert result.verdict == "fail" and result.cases == ["queue-saturated", "kv-cache-preemption"]
    assert result.message == "KV cache 97.1 % full with 14 request(s) waiting and 2 running: the server is saturated"
    calm = busy.replace("} 0.9712", "} 0.31").replace("num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 14.0",
                                                      "num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 0.0")
    result = _metrics_verdict(calm)
    assert result.verdict == "warn" and result.cases == ["kv-cache-preemption"]  # 7 preemptions since start
    idle = calm.replace("num_preemptions_total{engine=\"0\",model_name=\"tiny\"} 7.0",
                        "num_preemptions_total{engine=\"0\",model_name=\"tiny\"} 0.0")
    result = _metrics_verdict(idle)
    assert (result.verdict, result.message) == ("ok", "KV cache 31.0 % used, 2 running, 0 waiting, 0 preemption(s)")


@pytest.fixture
def live(vllm_server):
    vllm_server.start()  # no-op while running
    return vllm_server


@pytest.fixture
def settings(tmp_path):
    return Settings(runner_audit_db=tmp_path / "audit.sqlite3")


@pytest.mark.vllm
def test_server_checks_against_the_real_server(live, settings):
    venv_python = str(live.venv / "bin" / "python")
    host = local_host(settings, python=venv_python, endpoint=live.root_url, serve_port=live.port,
                      served_model=live.served_name)
    # 1. The whole server area against the idle server: liveness, models, port owner, process arguments.
    report = run_diagnosis("", settings=settings, local=True, hosts=[host], checks=["server"])
    checks = {c.id: c for c in report.hosts[0].checks}
    assert checks["server.health"].verdict == "ok", checks["server.health"]
    assert (checks["server.models"].verdict, checks["server.models"].message) == ("ok", "serves tiny (max_model_len 2048)")
    assert checks["server.port"].verdict == "ok" and checks["server.port"].message.startswith(f"vLLM listens on port {live.port}")

    # /metrics of the real server (idle here). Requests in flight are covered by the recorded busy /metrics
    # of a real server in tests/runner_fixtures (parser tests): probing under load on this 2-core machine
    # made the check subprocess itself time out in CI, which says nothing about the check.
    metrics = checks["server.metrics"]
    assert metrics.verdict in ("ok", "warn"), metrics
    assert 0 <= metrics.facts["kv_cache_usage"] <= 1
    assert metrics.facts["running"] >= 0 and metrics.facts["served_models"] == ["tiny"]
    process = checks["server.process"]
    assert f"pid {live.pid}," in process.message and f"--port {live.port}" in process.message
    if process.facts["server_count"] == 1:  # the harness starts vLLM with --enforce-eager
        assert (process.verdict, process.cases) == ("warn", ["enforce-eager-cuda-graphs-off"]), process.message
    else:  # another vLLM server runs on this machine (a parallel test or benchmark)
        assert (process.verdict, process.cases) == ("warn", ["gpu-memory-held-by-other-process"]), process.message


@pytest.mark.vllm
def test_wrong_model_name_and_dead_endpoint(live, settings):
    wrong = local_host(settings, endpoint=live.root_url, served_model="llama-3-70b")
    result = run_diagnosis("", settings=settings, local=True, hosts=[wrong], checks=["server.models"]).hosts[0].checks[0]
    assert result.verdict == "fail" and result.cases == ["model-name-not-found"] and "serves tiny, not llama-3-70b" in result.message
    dead = local_host(settings, endpoint="http://127.0.0.1:9")
    result = run_diagnosis("", settings=settings, local=True, hosts=[dead], checks=["server.health"]).hosts[0].checks[0]
    assert result.verdict == "fail" and result.cases == ["engine-dead"] and "Connection refused" in result.message


@pytest.mark.vllm
def test_real_vllm_install_and_import_probe(live, settings):
    """vLLM imported and its kernels loaded the way the server does, in a time-limited subprocess of the real
    vLLM venv; metadata read without import."""
    host = local_host(settings, python=str(live.venv / "bin" / "python"))
    report = run_diagnosis("", settings=settings, local=True, hosts=[host],
                           checks=["python.vllm_install", "python.vllm_import"])
    install, imported = report.hosts[0].checks
    assert install.verdict == "ok" and install.message.startswith("vLLM 0.32.0")
    # loaded through the platform's own loader (the CPU build picks _C_AVX512 or _C_AVX2 itself), not vllm._C
    assert imported.verdict == "ok" and imported.message.startswith("import vllm and its kernels work (vLLM 0.32.0")
    assert "CpuPlatform.import_kernels()" in imported.message


@pytest.mark.vllm
@pytest.mark.sshd
def test_server_checks_through_sshd(live, tmp_path):
    from runner_support import start_fleet
    from sshd_support import require_sshd

    require_sshd()
    fleet = start_fleet(tmp_path, {"gpu-serving": ("127.0.0.1", "healthy")},
                        extra_inventory={"gpu-serving": {"endpoint": live.root_url, "serve_port": live.port,
                                                         "served_model": live.served_name}})
    try:
        report = run_diagnosis("gpu-serving", settings=fleet.settings, checks=["server"])
    finally:
        fleet.stop()
    verdicts = {c.id: c.verdict for c in report.hosts[0].checks}
    assert verdicts["server.health"] == verdicts["server.models"] == verdicts["server.port"] == "ok"
    assert verdicts["server.metrics"] in ("ok", "warn")
