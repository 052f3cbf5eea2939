"""Fake GPU hosts on a real sshd (see tests/runner_fixtures/README.md), for the runner tests and bench.

    fleet = start_fleet(tmp_path, {"gpu01": ("127.0.0.2", "healthy"), ...})
    report = run_diagnosis("gpu01", settings=fleet.settings)
    fleet.stop()

`run_diagnosis` / `local_host` are the tests' short spelling of Pipeline.diagnose / Pipeline.local_host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from sshd_support import SshdHarness, _free_port, start_sshd

from bot.models import FleetReport, HostRequest
from bot.pipeline import Pipeline, Progress, Requester
from bot.runner.inventory import Host
from bot.settings import RunnerAccessRule, Settings

FIXTURES = Path(__file__).resolve().parent / "runner_fixtures"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_diagnosis(
    target: str,
    *,
    settings: Settings,
    checks: list[str] | None = None,
    max_tier: int = 0,
    local: bool = False,
    hosts: list[Host] | None = None,
    progress: Progress | None = None,
    user_id: str | None = None,
    channel_id: str | None = None,
    source: str = "cli",
) -> FleetReport:
    """One host diagnosis through the real composition root (a fresh Pipeline: nothing cached between tests)."""
    request = HostRequest(target, tuple(checks or ()), max_tier)
    requester = Requester(source="slack" if source == "slack" else "cli", user_id=user_id, channel_id=channel_id)
    return Pipeline(settings).diagnose(request, local=local, hosts=hosts, progress=progress, requester=requester)


def local_host(settings: Settings, **fields: object) -> Host:
    return Pipeline(settings).local_host(**fields)


def host_python() -> str:
    """A plain system Python for the fake hosts (no real torch/vLLM that could shadow the stand-ins)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def profile_env(root: Path, profile: str) -> dict[str, str]:
    """Environment sshd gives a host with this profile: fake tools first on PATH, the profile's data and
    Python stand-ins ahead of the healthy base, plus the variables in profile.env files."""
    dirs = [root / "profiles" / profile] if profile != "healthy" else []
    dirs.append(root / "profiles" / "healthy")
    home = root / "homes" / profile  # own HOME: no login-shell rc files, a predictable HF cache path
    home.mkdir(parents=True, exist_ok=True)
    own_bins = [str(d / "bin") for d in dirs if (d / "bin").is_dir()]  # a profile's own fakes come first
    env = {
        "HOME": str(home),
        "PATH": ":".join([*own_bins, str(root / "bin"), SYSTEM_PATH]),
        "FAKEGPU_DIRS": ":".join(str(d) for d in dirs),
        "PYTHONPATH": ":".join([str(d / "site") for d in dirs if (d / "site").is_dir()] + [str(root / "site")]),
    }
    for d in reversed(dirs):
        env_file = d / "profile.env"
        if env_file.exists():
            for line in env_file.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    env[key.strip()] = value.strip()
    return env


@dataclass
class Fleet:
    harness: SshdHarness
    root: Path  # a writable copy of tests/runner_fixtures
    inventory_path: Path
    settings: Settings
    addresses: dict[str, str]  # host name -> address
    serve_ports: dict[str, int]
    processes: list[int] = field(default_factory=list)  # pids we started, killed by stop()
    # local children we started (Popen): killed and reaped by stop(), so none is left to the GC
    # ("subprocess N is still running", ResourceWarning)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for pid in self.processes:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for child in self.children:
            child.kill()
            child.wait(timeout=30)
        self.harness.stop()


def start_fleet(
    workdir: Path,
    hosts: dict[str, tuple[str, str]],
    *,
    extra_inventory: dict[str, dict] | None = None,
    unreachable: dict[str, str] | None = None,
    access: list[RunnerAccessRule] | None = None,
    expected_gpus: int = 2,
    sshd_config: str = "",
) -> Fleet:
    """One sshd serving every address in `hosts` (name -> (address, profile)); an own-format inventory
    with every host (plus `unreachable` names -> addresses nobody listens on); Settings pointing at it."""
    root = workdir / "fakegpu"
    shutil.copytree(FIXTURES, root)
    by_address: dict[str, dict[str, str]] = {}
    for _name, (address, profile) in hosts.items():
        by_address.setdefault(address, profile_env(root, profile))
    harness = start_sshd(workdir / "sshd", by_address, extra_config=sshd_config)
    python = host_python()
    serve_ports = {}
    inventory: dict = {"defaults": {"port": harness.port, "user": harness.user, "key": str(harness.client_key),
                                    "python": python, "expected_gpus": expected_gpus}, "hosts": {}, "groups": {}}
    for name, (address, _profile) in hosts.items():
        serve_ports[name] = _free_port(["127.0.0.1"])
        inventory["hosts"][name] = {"address": address, "serve_port": serve_ports[name],
                                    **(extra_inventory or {}).get(name, {})}
    for name, address in (unreachable or {}).items():
        inventory["hosts"][name] = {"address": address}
    inventory["groups"]["fleet"] = list(inventory["hosts"])
    inventory_path = workdir / "inventory.yaml"
    inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    ssh_config = workdir / "ssh_config"
    ssh_config.write_text("# empty: the inventory says everything; keeps ~/.ssh/config out of the tests\n")
    settings = Settings(
        runner_inventory=inventory_path,
        runner_known_hosts=harness.known_hosts,
        runner_ssh_config=ssh_config,
        runner_audit_db=workdir / "audit.sqlite3",
        runner_connect_timeout_s=5,
        runner_access=access or [],
    )
    addresses = {name: a for name, (a, _p) in hosts.items()} | dict(unreachable or {})
    return Fleet(harness, root, inventory_path, settings, addresses, serve_ports)


def spawn_orphan_vllm_worker(fleet: Fleet) -> int:
    """A process that looks like a vLLM worker left behind by a crashed server: titled VLLM::Worker_TP0
    and re-parented away from any vLLM process. Returns its pid (killed by fleet.stop())."""
    out = subprocess.run(
        ["bash", "-c", "(exec -a VLLM::Worker_TP0 sleep 600) >/dev/null 2>&1 & echo $!"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    pid = int(out.stdout.strip())
    fleet.processes.append(pid)
    return pid


def spawn_foreign_gpu_process(fleet: Fleet) -> int:
    """A process that is not vLLM (a training script) for the recorded compute-apps list to point at.
    Returns its pid (killed by fleet.stop())."""
    out = subprocess.run(
        ["bash", "-c", "(exec -a 'python3 train.py --epochs 3' sleep 600) >/dev/null 2>&1 & echo $!"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    pid = int(out.stdout.strip())
    fleet.processes.append(pid)
    return pid


def spawn_port_squatter(fleet: Fleet, port: int) -> int:
    """A non-vLLM service listening on `port` (a plain HTTP server), as on a host where the serving port is
    taken. Returns its pid once it listens."""
    import socket
    import time

    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fleet.children.append(proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc.pid
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"http.server did not listen on {port}")
