"""Issue 28, host checks: a stand-in fleet of planted faults over a REAL sshd, each named at its root.

- a host whose commands never return is a `timeout` naming the command and the limit (not "sh and GNU
  timeout are needed: exit status None"), and its session is killed;
- timed-out commands do not use up sshd's MaxSessions (later checks on the host still open channels);
- CUDA that cannot start (Error 802, no driver) is blamed, not CUDA_VISIBLE_DEVICES;
- terminal escape codes in host output never reach a report;
- CPU-only torch on a GPU host fails; no HF token is not a warning when the model does not need one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_support import run_diagnosis, start_fleet
from sshd_support import require_sshd

import bot.runner.engine as engine
import bot.runner.ssh as ssh

pytestmark = pytest.mark.sshd

HOSTS = {
    "gpu-healthy": ("127.0.0.21", "healthy"),
    "gpu-fabric-down": ("127.0.0.22", "cuda-802-fabric-down"),
    "gpu-no-driver": ("127.0.0.23", "cuda-no-driver"),
    "gpu-escape": ("127.0.0.24", "escape-gpu-name"),
    "gpu-cpu-torch": ("127.0.0.25", "cpu-torch"),
}
# planted fault -> (check, verdict, KB case)
EXPECTED = {
    "gpu-fabric-down": ("python.torch", "fail", "fabric-manager-not-running"),
    "gpu-no-driver": ("python.torch", "fail", "no-gpu-detected"),
    "gpu-cpu-torch": ("python.torch", "fail", "torch-cuda-version-mismatch"),
}
AREAS = ("gpu", "cuda", "python", "system", "env")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    require_sshd()
    fleet = start_fleet(tmp_path_factory.mktemp("faults"), HOSTS)
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def report(fleet):
    return run_diagnosis("fleet", settings=fleet.settings, checks=list(AREAS))


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_each_planted_fault_names_its_cause(report, host):
    check_id, verdict, case = EXPECTED[host]
    result = report.host(host).check(check_id)
    assert (result.verdict, case in result.cases) == (verdict, True), (result.message, result.cases)
    assert "CUDA_VISIBLE_DEVICES" not in result.message


def test_cuda_start_failures_name_the_real_cause(report):
    fabric = report.host("gpu-fabric-down").check("python.torch")
    assert "error 802" in fabric.message and "Fabric Manager" in fabric.message
    assert "cuda-visible-devices-invalid" not in fabric.cases
    no_driver = report.host("gpu-no-driver").check("python.torch")
    assert "no NVIDIA driver is loaded" in no_driver.message


def test_cpu_only_torch_on_a_gpu_host_fails(report):
    result = report.host("gpu-cpu-torch").check("python.torch")
    assert result.message.startswith("torch 2.8.0+cpu is a CPU-only build on a host that should have 2 GPU(s)")


def test_escape_codes_never_reach_the_report(report):
    host = report.host("gpu-escape")
    texts = [t for c in host.checks for t in (c.message, c.stdout, c.stderr)]
    assert any("NVIDIA H100 80GB HBM3" in t for t in texts)
    assert not [t for t in texts if "\x1b" in t or "\x07" in t]
    assert "\x1b" not in report.raw_text() and "\\u001b" not in report.to_json()
    names = host.check("python.torch").message
    assert "GPU0 NVIDIA H100 80GB HBM3 (compute 9.0)" in names


def test_healthy_host_is_all_green(report):
    healthy = report.host("gpu-healthy")
    assert [(c.id, c.verdict, c.message) for c in healthy.checks if c.verdict not in ("ok", "skipped")] == []


def test_no_hf_token_warns_only_for_a_hub_model_that_is_not_local(fleet, tmp_path):
    import yaml

    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    # gpu-cpu-torch has an empty HF_TOKEN (its profile.env)
    inventory["hosts"]["gpu-cpu-torch"]["served_model"] = "meta-llama/Llama-3.1-8B-Instruct"
    inventory["hosts"]["gpu-escape"]["served_model"] = "meta-llama/Llama-3.1-8B-Instruct"
    inventory["hosts"]["gpu-escape"]["model_dir"] = str(tmp_path)  # local weights
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    settings = fleet.settings.model_copy(update={"runner_inventory": path})
    report = run_diagnosis("fleet", settings=settings, checks=["env.hf_access"])
    verdicts = {h.host: h.checks[0].verdict for h in report.hosts}
    assert verdicts == {"gpu-healthy": "ok", "gpu-fabric-down": "ok", "gpu-no-driver": "ok", "gpu-escape": "ok",
                        "gpu-cpu-torch": "warn"}
    [warn] = [h.checks[0] for h in report.hosts if h.host == "gpu-cpu-torch"]
    assert "meta-llama/Llama-3.1-8B-Instruct is not cached" in warn.message
    assert warn.cases == ["hf-gated-repo-unauthorized"]


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_host_that_never_answers_is_a_timeout_and_its_session_is_killed(tmp_path, monkeypatch):
    require_sshd()
    monkeypatch.setattr(engine, "PREREQ_TIMEOUT_S", 1)
    monkeypatch.setattr(ssh, "CLIENT_GRACE_S", 0.5)
    fleet = start_fleet(tmp_path, {"gpu-slow": ("127.0.0.26", "never-returns")})
    try:
        [host] = run_diagnosis("gpu-slow", settings=fleet.settings, checks=["system.shm"]).hosts
        error = host.error or ""
        assert host.error_kind == "timeout", error
        assert "timeout -k 5 1 sh -s -- df" in error and "within 1 s" in error
        assert "sh and GNU timeout are needed" not in error and "exit status None" not in error
        pids = _pids(fleet.root / "profiles" / "never-returns" / "timeout.pids")
        assert pids
        if os.geteuid() != 0:  # sshd refuses `signal` requests in a root login's session (no privsep child)
            deadline = time.monotonic() + 5
            while any(_alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(_alive(p) for p in pids), "the hung command still runs on the host"
    finally:
        for pid in _pids(fleet.root / "profiles" / "never-returns" / "timeout.pids"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        fleet.stop()


@pytest.mark.parametrize("how", ["escaped", "stuck"])
def test_timed_out_commands_do_not_use_up_max_sessions(tmp_path, monkeypatch, how):
    """sshd counts a session against MaxSessions while its channel is open, and while a process in it lives.
    escaped: a grandchild holds stdout open after `timeout` gave up (closing the channel frees the session);
    stuck: the command never ends inside the session (the runner carries on over a fresh connection)."""
    require_sshd()
    monkeypatch.setattr(ssh, "CLIENT_GRACE_S", 0.5)
    profile = "healthy" if how == "escaped" else "stuck-in-session"
    fleet = start_fleet(tmp_path, {"gpu-busy": ("127.0.0.27", profile)}, sshd_config="MaxSessions 3")
    pid_file = tmp_path / "escaped.pids"
    checks = tmp_path / "checks"
    checks.mkdir()
    entries = []
    for n in range(3):
        argv = f"[sh, -c, 'setsid sleep 30 & echo $! >> {pid_file}; echo {n}']" if how == "escaped" else "[sleep, '30']"
        entries.append(
            f"  - id: system.stuck{n}\n    title: never answers\n    tier: 0\n    argv: {argv}\n"
            "    timeout_s: 1\n    parser: key_value\n    rules: [{verdict: ok, message: answered}]\n")
    for n in range(3):
        entries.append(
            f"  - id: system.fine{n}\n    title: answers\n    tier: 0\n    argv: [echo, 'n={n}']\n"
            "    timeout_s: 5\n    parser: key_value\n    rules: [{verdict: ok, message: 'answered {kv.n}'}]\n")
    (checks / "system.yaml").write_text("area: system\nchecks:\n" + "".join(entries))
    settings = fleet.settings.model_copy(update={"runner_checks_dir": checks, "runner_max_channels_per_host": 2})  # one below MaxSessions, as in production
    try:
        [host] = run_diagnosis("gpu-busy", settings=settings).hosts
        assert host.error is None, host.error
        verdicts = {c.id: (c.verdict, c.message) for c in host.checks}
        assert {k: v[0] for k, v in verdicts.items()} == {  # noqa: E501
            "system.stuck0": "timeout", "system.stuck1": "timeout", "system.stuck2": "timeout",
            "system.fine0": "ok", "system.fine1": "ok", "system.fine2": "ok"}, [
            v for v in verdicts.values() if v[0] not in ("ok", "timeout")]
        assert "open failed" not in str(verdicts), verdicts
    finally:
        for pid in _pids(pid_file) + _pids(fleet.root / "profiles" / "stuck-in-session" / "stuck.pids"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        fleet.stop()


# --- the CLI on the planted fleet: pictures, a pair that disagrees, a mistyped name, a relative --python ----
REPO = Path(__file__).resolve().parent.parent


def _cli(fleet, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLLM_DOCTOR_INVENTORY": str(fleet.inventory_path),
           "VLLM_DOCTOR_KNOWN_HOSTS": str(fleet.harness.known_hosts),
           "VLLM_DOCTOR_SSH_CONFIG": str(fleet.settings.runner_ssh_config),
           "VLLM_DOCTOR_AUDIT_DB": str(fleet.settings.runner_audit_db), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_plot_after_gpu_processes_alone_draws_every_gpu(fleet, tmp_path):
    png = tmp_path / "mem.png"
    out = _cli(fleet, "gpu-healthy", "--check", "gpu.processes", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    assert "nothing to draw" not in out.stderr and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_pair_that_disagrees_is_named(fleet):
    import yaml

    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    inventory["groups"]["pair"] = ["gpu-healthy", "gpu-cpu-torch"]
    fleet.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    out = _cli(fleet, "pair", "--check", "python.torch", "--json")
    data = json.loads(out.stdout)
    assert data["fleet_diff"] == []  # two hosts: neither is "the odd one"
    assert data["hosts_differ"] == [
        "the 2 hosts differ on torch: gpu-healthy 2.8.0+cu128, gpu-cpu-torch 2.8.0+cpu (with two hosts neither "
        "can be called the odd one; check which value is intended)"]
    text = _cli(fleet, "pair", "--check", "python.torch")
    assert "the 2 hosts differ on torch" in text.stdout


def test_a_mistyped_host_gets_a_suggestion_in_one_line(fleet):
    out = _cli(fleet, "gpu-helthy")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: 'gpu-helthy' is not a host or group in the inventory; did you mean 'gpu-healthy'?"]


def test_local_python_may_be_a_relative_path_and_option_errors_are_one_line(fleet, tmp_path):
    venv_python = Path(sys.executable)
    relative = os.path.relpath(venv_python, tmp_path)  # as typed from another directory
    out = _cli(fleet, "--local", "--python", relative, "--check", "python.runtime", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [check] = json.loads(out.stdout)["hosts"][0]["checks"]
    assert check["verdict"] == "ok" and f"({venv_python}," in check["message"], check
    bad = _cli(fleet, "--local", "--expected-gpus", "-1", "--endpoint", "ftp://x", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: bad --endpoint: not an http(s) URL: 'ftp://x'; bad --expected-gpus: Input should be greater "
        "than or equal to 0"]
