"""End to end over a REAL OpenSSH sshd: healthy and broken stand-in GPU hosts on 127.0.0.x.

Each broken host must map to its KB case; unreachable hosts, host-key and auth problems, a hung command
(killed on the host), a bastion, the CLI and the audit log are checked on the same daemon.
Needs openssh-server (skipped locally without it, FAILS when CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from runner_support import (
    run_diagnosis,
    spawn_foreign_gpu_process,
    spawn_orphan_vllm_worker,
    spawn_port_squatter,
    start_fleet,
)
from sshd_support import require_sshd

from bot.models import REPORTED_FACTS
from bot.runner.audit import AuditLog

pytestmark = pytest.mark.sshd
REPO = Path(__file__).resolve().parent.parent

HOSTS = {  # name: (address, profile under tests/runner_fixtures/profiles)
    "gpu-healthy": ("127.0.0.1", "healthy"),
    "gpu-old-driver": ("127.0.0.2", "driver-too-old"),
    "gpu-zombie": ("127.0.0.3", "zombie-gpu-memory"),
    "gpu-no-cudnn": ("127.0.0.4", "libcudnn-missing"),
    "gpu-small-shm": ("127.0.0.5", "shm-64mb"),
    "gpu-bad-cvd": ("127.0.0.6", "cvd-missing-gpu"),
    "gpu-port-taken": ("127.0.0.7", "port-taken"),
    "gpu-hung": ("127.0.0.8", "hung-nvidia-smi"),
    "gpu-new-key": ("127.0.0.9", "healthy"),  # known_hosts holds another key for it
    "gpu-unknown-key": ("127.0.0.10", "healthy"),  # not in known_hosts at all
    "gpu-pre-r535": ("127.0.0.12", "pre-r535"),  # R525: clocks_event_reasons is not a query field yet
    "gpu-r470": ("127.0.0.13", "r470"),  # no compute_cap either; inventory expects 4 GPUs, 2 answer
    "gpu-no-smi": ("127.0.0.14", "no-nvidia-smi"),  # expects 2 GPUs, no nvidia-smi on the PATH
    "cpu-only": ("127.0.0.14", "no-nvidia-smi"),  # the same host declared CPU-only (expected_gpus: 0)
    "gpu-no-driver": ("127.0.0.15", "driver-not-loaded"),
    "gpu-foreign": ("127.0.0.16", "foreign-gpu-memory"),  # a training job holds 70 of 80 GiB on GPU0
    "gpu-sigill": ("127.0.0.17", "cpu-illegal-instruction"),  # vLLM's kernels die by SIGILL when loaded
}
EXTRA_INVENTORY = {"gpu-bad-login": {}, "gpu-r470": {"expected_gpus": 4}, "cpu-only": {"expected_gpus": 0}}
FLEET = [h for h in HOSTS if h != "gpu-hung"] + ["gpu-down", "gpu-bad-login"]

# broken host -> (check, verdict, KB case the finding must point to)
EXPECTED = {
    "gpu-old-driver": [("cuda.driver_vs_torch", "fail", "driver-too-old"), ("python.torch", "fail", "driver-too-old")],
    "gpu-zombie": [("gpu.processes", "fail", "gpu-memory-held-by-other-process")],
    "gpu-no-cudnn": [("python.torch", "fail", "libcudnn-missing"), ("cuda.cudnn", "fail", "libcudnn-missing")],
    "gpu-small-shm": [("system.shm", "fail", "dev-shm-too-small")],
    "gpu-bad-cvd": [("python.torch", "fail", "cuda-visible-devices-invalid"),
                    ("env.visible_devices", "fail", "cuda-visible-devices-invalid")],
    "gpu-port-taken": [("server.port", "fail", "port-in-use")],
    "gpu-r470": [("gpu.inventory", "fail", "gpu-fell-off-bus-xid")],
    "gpu-no-smi": [("gpu.driver", "fail", "no-gpu-detected")],
    "gpu-no-driver": [("gpu.driver", "fail", "no-gpu-detected"), ("gpu.inventory", "fail", "no-gpu-detected")],
    "gpu-foreign": [("gpu.processes", "fail", "gpu-memory-held-by-other-process")],
    "gpu-sigill": [("python.vllm_import", "fail", "cpu-illegal-instruction")],
}
# Areas whose verdicts depend only on the host's (fake) GPU stack, not on what else runs on this machine.
HOST_AREAS = ("gpu", "cuda", "python", "system", "env")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    require_sshd()
    workdir = tmp_path_factory.mktemp("runner-sshd")
    fleet = start_fleet(workdir, HOSTS, unreachable={"gpu-down": "127.0.0.11"}, extra_inventory=EXTRA_INVENTORY)
    try:
        # gpu-new-key: replace its known_hosts entry with another key; gpu-unknown-key: drop it
        other = workdir / "other_host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        other_line = " ".join(other.with_suffix(".pub").read_text().split()[:2])
        port = fleet.harness.port
        lines = fleet.harness.known_hosts.read_text().splitlines()
        lines = [ln for ln in lines if not ln.startswith(("[127.0.0.9]", "[127.0.0.10]"))]
        lines.append(f"[127.0.0.9]:{port} {other_line}")
        fleet.harness.known_hosts.write_text("\n".join(lines) + "\n")
        # gpu-bad-login: a reachable healthy address, but a key sshd does not accept
        inventory = yaml.safe_load(fleet.inventory_path.read_text())
        inventory["hosts"]["gpu-bad-login"] = {"address": "127.0.0.1", "key": str(other)}
        inventory["hosts"]["gpu-down"]["port"] = port
        fleet.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        # the broken hosts' live state: a leftover vLLM worker holding GPU memory, a squatter on the port
        pid = spawn_orphan_vllm_worker(fleet)
        (fleet.root / "profiles" / "zombie-gpu-memory" / "leftover.pid").write_text(str(pid))
        pid = spawn_foreign_gpu_process(fleet)
        (fleet.root / "profiles" / "foreign-gpu-memory" / "foreign.pid").write_text(str(pid))
        spawn_port_squatter(fleet, fleet.serve_ports["gpu-port-taken"])
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(scope="module")
def report(fleet):
    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    inventory["groups"]["fleet"] = FLEET
    fleet.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return run_diagnosis("fleet", settings=fleet.settings)


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_each_broken_host_maps_to_its_kb_case(report, host):
    host_report = report.host(host)
    assert host_report.error is None
    for check_id, verdict, case in EXPECTED[host]:
        result = host_report.check(check_id)
        assert (result.verdict, case in result.cases) == (verdict, True), (check_id, result.message, result.cases)
        assert case in report.case_ids()


def test_broken_hosts_fail_only_where_they_are_broken(report):
    """The failure is specific: a broken host does not fail unrelated checks (no false alarms)."""
    for host, expectations in EXPECTED.items():
        expected_ids = {check_id for check_id, _, _ in expectations}
        # libcudnn missing also breaks `import vllm` (vllm imports torch): the same case, one more check
        if host == "gpu-no-cudnn":
            expected_ids.add("python.vllm_import")
        failing = {c.id for c in report.host(host).checks if c.verdict == "fail" and c.area in HOST_AREAS + ("server",)
                   and c.id != "server.process"}
        assert failing == expected_ids, host


def test_healthy_host_is_clean(report):
    healthy = report.host("gpu-healthy")
    problems = [(c.id, c.verdict, c.message) for c in healthy.checks
                if c.area in HOST_AREAS and c.verdict not in ("ok", "skipped")]
    assert problems == []
    ok = {c.id for c in healthy.checks if c.verdict == "ok"}
    assert {"gpu.driver", "gpu.inventory", "cuda.driver_vs_torch", "cuda.arch", "python.torch", "python.vllm_install",
            "python.vllm_import", "cuda.cudnn", "system.shm", "env.visible_devices", "env.hf_access"} <= ok
    assert healthy.check("python.vllm_install").message.startswith("vLLM 0.11.0 at ")
    assert healthy.check("model.files").verdict == "skipped"  # no model_dir in the inventory


def test_unreachable_auth_and_host_key_problems_are_per_host(report, fleet):
    kinds = {h.host: h.error_kind for h in report.hosts}
    assert kinds["gpu-down"] == "HostUnreachable"
    assert kinds["gpu-bad-login"] == "AuthFailed"
    assert kinds["gpu-new-key"] == "HostKeyMismatch" and "does NOT match" in report.host("gpu-new-key").error
    assert kinds["gpu-unknown-key"] == "HostKeyMismatch" and "never accepted" in report.host("gpu-unknown-key").error
    # the hint to record the key names the port sshd really listens on
    assert f"ssh-keyscan -p {fleet.harness.port} -H 127.0.0.10 >> " in report.host("gpu-unknown-key").error
    assert all(kinds[h] is None for h in EXPECTED) and kinds["gpu-healthy"] is None
    assert report.verdict == "fail"


def test_json_shape_and_secrets(report):
    data = json.loads(report.to_json())
    assert [h["host"] for h in data["hosts"]] == FLEET
    kinds = {h["host"]: h["error_kind"] for h in data["hosts"]}  # scripts branch on it, not on the text
    assert (kinds["gpu-down"], kinds["gpu-bad-login"], kinds["gpu-new-key"], kinds["gpu-healthy"]) == (
        "HostUnreachable", "AuthFailed", "HostKeyMismatch", None)
    check = data["hosts"][0]["checks"][0]
    assert set(check) - {"facts"} == {"id", "verdict", "message", "cases", "duration_s"}
    # the only facts a JSON report carries are version strings (bot/models.py REPORTED_FACTS)
    for c in (c for h in data["hosts"] for c in h["checks"] if "facts" in c):
        assert set(c["facts"]) <= set(REPORTED_FACTS[c["id"]]) and all(isinstance(v, str) for v in c["facts"].values())
    assert {c["verdict"] for h in data["hosts"] for c in h["checks"]} <= {"ok", "warn", "fail", "error", "skipped", "timeout"}
    raw = report.raw_text()
    assert "hf_FAKEtestTOKEN" not in raw and "hf_FAKEtestTOKEN" not in report.to_json()
    assert "HF_TOKEN=[REDACTED:hf-token]" in raw
    assert report.host("gpu-healthy").check("env.hf_access").message.startswith("HF token set in HF_TOKEN")
    facts = report.facts_for_prompt("gpu-small-shm")
    assert facts.splitlines()[0].startswith("gpu-small-shm system.shm [fail]: /dev/shm is only 64 MiB")
    assert "hf_FAKE" not in report.facts_for_prompt()


def test_fleet_run_is_audited(report, fleet):
    # how fast is measured by bench/bench_runner.py, not asserted here (a loaded CI machine is no clock)
    [run] = [r for r in AuditLog(fleet.settings.runner_audit_db).runs() if r["target"] == "fleet"]
    assert run["status"] == "done" and run["hosts"] == FLEET and run["user_id"].startswith("cli:")
    results = {(r["host"], r["check_id"]): r["verdict"] for r in run["results"]}
    assert results[("gpu-small-shm", "system.shm")] == "fail" and results[("gpu-down", "")] == "error"


def test_hung_command_is_killed_on_the_host(fleet, tmp_path):
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "gpu.yaml").write_text(
        "area: gpu\nchecks:\n  - id: gpu.driver\n    title: driver answers\n    tier: 0\n    argv: [nvidia-smi]\n"
        "    timeout_s: 2\n    requires: [nvidia-smi]\n    parser: nvidia_smi_header\n"
        "    rules: [{verdict: ok, message: 'driver {driver_version}'}]\n")
    settings = fleet.settings.model_copy(update={"runner_checks_dir": checks})
    report = run_diagnosis("gpu-hung", settings=settings)
    result = report.host("gpu-hung").check("gpu.driver")
    assert (result.verdict, result.message) == ("timeout", "no answer within 2 s (killed on the host)")
    assert result.rc == 124  # GNU timeout answered on the host, not the client deadline
    pid = int((fleet.root / "profiles" / "hung-nvidia-smi" / "nvidia-smi.pid").read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the hung nvidia-smi is still running on the host"


def test_proxyjump_through_a_bastion_uses_one_connection(fleet, tmp_path):
    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    inventory["hosts"]["bastion"] = {"address": "127.0.0.1"}
    for name in ("gpu-old-driver", "gpu-small-shm", "gpu-bad-cvd"):
        inventory["hosts"][name]["proxy_jump"] = "bastion"
    inventory["groups"] = {"behind": ["gpu-old-driver", "gpu-small-shm", "gpu-bad-cvd"]}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    before = fleet.harness.log_text().count(f"on 127.0.0.1 port {fleet.harness.port}")
    report = run_diagnosis("behind", settings=fleet.settings.model_copy(update={"runner_inventory": path}),
                           checks=["system.shm"])
    assert [(h.host, h.error, h.check("system.shm").verdict) for h in report.hosts] == [
        ("gpu-old-driver", None, "ok"), ("gpu-small-shm", None, "fail"), ("gpu-bad-cvd", None, "ok")]
    def connections() -> int:
        return fleet.harness.log_text().count(f"on 127.0.0.1 port {fleet.harness.port}") - before

    deadline = time.monotonic() + 10  # sshd may write its log line after the run returned
    while connections() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connections() == 1, "expected exactly one SSH connection to the bastion"


def test_cli_end_to_end(fleet):
    env = {**os.environ, "VLLM_DOCTOR_INVENTORY": str(fleet.inventory_path),
           "VLLM_DOCTOR_KNOWN_HOSTS": str(fleet.harness.known_hosts),
           "VLLM_DOCTOR_SSH_CONFIG": str(fleet.settings.runner_ssh_config),
           "VLLM_DOCTOR_AUDIT_DB": str(fleet.settings.runner_audit_db)}
    out = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "gpu-small-shm", "--json", "--check", "system"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr  # a failing check
    data = json.loads(out.stdout)
    shm = next(c for c in data["hosts"][0]["checks"] if c["id"] == "system.shm")
    assert shm["verdict"] == "fail" and shm["cases"] == ["dev-shm-too-small"]
    text = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "gpu-healthy", "--check", "gpu"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "gpu.driver" in text.stdout and "driver 570.86.15" in text.stdout
    bad = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "gpu-healthy; id"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "is not a host or group name" in bad.stderr



# --- what the runner reports on older, broken or odd hosts (issue 12, item 4) -----------------------------
def test_pre_r535_driver_throttle_reasons_come_from_the_old_field_name(report):
    throttle = report.host("gpu-pre-r535").check("gpu.throttle")
    # GPU1's hardware slowdown is only in the clocks_throttle_reasons answer: the fallback was read
    assert (throttle.verdict, throttle.message) == ("warn", "clocks slowed: GPU1: HW slowdown (hottest 84 °C): "
                                                             "expect lower throughput")


def test_r470_driver_still_counts_gpus(report):
    host = report.host("gpu-r470")
    inventory = host.check("gpu.inventory")
    assert inventory.message.startswith("2 GPU(s) visible but the inventory expects 4")
    assert host.check("env.visible_devices").message == "CUDA_VISIBLE_DEVICES not set: all 2 GPU(s) visible"
    assert host.check("gpu.throttle").verdict == "ok"


def test_missing_nvidia_smi_fails_unless_the_host_is_cpu_only(report):
    gpu = report.host("gpu-no-smi").check("gpu.driver")
    assert gpu.message.startswith("nvidia-smi is not on the PATH but the inventory expects 2 GPU(s)")
    cpu = report.host("cpu-only")
    assert (cpu.check("gpu.driver").verdict, cpu.check("gpu.driver").message) == (
        "skipped", "CPU-only host (expected_gpus: 0): no nvidia-smi needed")
    assert cpu.by_area()["gpu"] == "skipped"


def test_driver_not_loaded_skips_the_gpu_checks_that_need_it(report):
    host = report.host("gpu-no-driver")
    assert "couldn't communicate with the NVIDIA driver" in host.check("gpu.driver").message
    for check_id in ("gpu.modes", "gpu.ecc", "gpu.throttle", "gpu.topology", "gpu.processes"):
        result = host.check(check_id)
        assert result.verdict == "skipped" and "couldn't communicate with the NVIDIA driver" in result.message, (
            check_id, result.message)
    assert not [c.id for c in host.checks if c.verdict == "error"]


def test_foreign_gpu_memory_is_weighed_against_the_planned_share(report, fleet, tmp_path):
    result = report.host("gpu-foreign").check("gpu.processes")
    assert result.message.startswith("GPU0 (00000000:18:00.0): 70.0 of 79.6 GiB held by other processes, so only "
                                     "12.1 % is free: vLLM at gpu_memory_utilization 0.9 will not start")
    assert "python3 train.py --epochs 3" in result.message
    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    inventory["hosts"]["gpu-foreign"]["gpu_memory_utilization"] = 0.1  # a small model that fits beside it
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    small = run_diagnosis("gpu-foreign", settings=fleet.settings.model_copy(update={"runner_inventory": path}),
                          checks=["gpu.processes"]).hosts[0].check("gpu.processes")
    assert small.verdict == "warn" and small.message.startswith("non-vLLM process holds GPU memory")


def test_vllm_kernels_crashing_by_sigill_is_a_verdict(report):
    result = report.host("gpu-sigill").check("python.vllm_import")
    assert result.message == ("import vllm died with SIGILL: SIGILL (Illegal instruction: this build needs CPU "
                              "features this host lacks (e.g. AVX-512)); install the vLLM build made for this CPU")
    healthy = report.host("gpu-healthy").check("python.vllm_import")
    assert "CudaPlatform.import_kernels()" in healthy.message  # loaded the way the server loads it


def test_sigkill_after_ignored_sigterm_over_ssh_is_a_timeout(fleet, tmp_path):
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "system.yaml").write_text(
        "area: system\nchecks:\n  - id: system.stubborn\n    title: ignores SIGTERM\n    tier: 0\n"
        "    argv: [sh, -c, \"trap '' TERM; sleep 60\"]\n    timeout_s: 1\n    parser: key_value\n"
        "    rules: [{verdict: ok, message: answered}]\n")
    settings = fleet.settings.model_copy(update={"runner_checks_dir": checks})
    result = run_diagnosis("gpu-healthy", settings=settings).host("gpu-healthy").check("system.stubborn")
    assert (result.verdict, result.message, result.rc) == ("timeout", "no answer within 1 s (killed on the host)", -9)
