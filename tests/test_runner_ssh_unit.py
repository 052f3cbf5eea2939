"""SSH transport and engine against asyncssh's in-process SSH server (fast; no sshd needed).

Each fake host is a real SSH server on 127.0.0.1 that answers commands from a table; the client side is
the production code (bot.runner.ssh.SSHConnector + bot.runner.engine), host keys verified against a
known_hosts file. The real-OpenSSH counterpart is tests/test_runner_sshd.py.
"""

from __future__ import annotations

import asyncio
import shlex
import textwrap
from pathlib import Path

import asyncssh
import pytest

from bot.runner.catalogue import load_catalogue
from bot.runner.engine import _PREREQ_SCRIPT, diagnose_hosts
from bot.runner.inventory import Host
from bot.runner.ssh import SSHConnector

CHECKS = """\
area: gpu
checks:
  - id: gpu.driver
    title: driver answers
    why: test
    tier: 0
    argv: [nvidia-smi]
    timeout_s: 5
    requires: [nvidia-smi]
    parser: nvidia_smi_header
    rules:
      - when: {rc: {ne: 0}}
        verdict: fail
        message: "nvidia-smi failed: {error}"
        cases: [no-gpu-detected]
      - verdict: ok
        message: "driver {driver_version}"
  - id: gpu.driver_again
    title: same command, second check
    why: test
    tier: 0
    argv: [nvidia-smi]
    timeout_s: 5
    requires: [nvidia-smi]
    parser: nvidia_smi_header
    rules:
      - verdict: ok
        message: "CUDA {cuda_version}"
  - id: gpu.hangs
    title: a command that never exits
    why: test
    tier: 0
    argv: [hang]
    timeout_s: 1
    parser: key_value
    rules: [{verdict: ok, message: "never"}]
  - id: gpu.remote_timeout
    title: killed by timeout on the host
    why: test
    tier: 0
    argv: [slow]
    timeout_s: 1
    parser: key_value
    rules: [{verdict: ok, message: "never"}]
  - id: gpu.dcgm
    title: needs a missing binary
    why: test
    tier: 0
    argv: [dcgmi, diag, -r, "1"]
    requires: [dcgmi]
    parser: dcgm_diag
    rules: [{verdict: ok, message: "never"}]
  - id: gpu.derived
    title: derived from gpu.driver
    why: test
    tier: 0
    needs: [gpu.driver]
    rules:
      - when: {"gpu.driver:cuda_version": {version_lt: "12.0"}}
        verdict: fail
        message: "old"
      - verdict: ok
        message: "CUDA {gpu.driver:cuda_version} is new enough"
  - id: gpu.derived_from_hang
    title: derived from a check that timed out
    why: test
    tier: 0
    needs: [gpu.hangs]
    rules: [{verdict: ok, message: "never"}]
"""
SMI = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"


class FakeHost:
    """An in-process SSH server: replies from `outputs` keyed by the command's argv without the
    `timeout -k 5 N` prefix; 'hang' never answers; 'slow' exits 124 like GNU timeout does."""

    def __init__(self, outputs: dict[tuple[str, ...], tuple[str, int]], binaries: set[str]):
        self.outputs = outputs
        self.binaries = binaries
        self.commands: list[list[str]] = []
        self.connections = 0
        self.server = None
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        argv = shlex.split(process.command or "")
        assert argv[:3] == ["timeout", "-k", "5"], argv  # every command is wrapped for the host side
        argv = argv[4:]
        self.commands.append(argv)
        stdin = await process.stdin.read() if argv[:3] == ["sh", "-s", "--"] else ""
        if argv[:3] == ["sh", "-s", "--"] and stdin == _PREREQ_SCRIPT:
            process.stdout.write("".join(f"{b}\n" for b in argv[3:] if b in self.binaries))
            process.exit(0)
        elif argv == ["hang"]:
            await asyncio.sleep(3600)
        elif argv == ["slow"]:
            process.exit(124)
        else:
            out, rc = self.outputs.get(tuple(argv), ("", 127))
            process.stdout.write(out)
            process.exit(rc)

    async def start(self, authorized: str, *, allow_forwarding: bool = False) -> int:
        host = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn):
                host.connections += 1

            def connection_requested(self, dest_host, dest_port, orig_host, orig_port):
                return allow_forwarding

        self.server = await asyncssh.create_server(
            Server, "127.0.0.1", 0, server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(authorized),
            process_factory=self.handle, encoding="utf-8",
        )  # fmt: skip
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def catalogue(tmp_path):
    d = tmp_path / "checks"
    d.mkdir()
    (d / "gpu.yaml").write_text(CHECKS)
    return load_catalogue(d)


@pytest.fixture
def client_key(tmp_path):
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "client_key"
    key.write_private_key(str(path))
    return path, key.export_public_key().decode()


def _known(lines: list[tuple[int, asyncssh.SSHKey]], path: Path) -> Path:
    path.write_text("".join(f"[127.0.0.1]:{port} {key.export_public_key().decode()}" for port, key in lines))
    return path


def test_host_failures_are_reported_per_host_and_the_rest_completes(tmp_path, catalogue, client_key, monkeypatch):
    monkeypatch.setattr("bot.runner.ssh.CLIENT_GRACE_S", 0.5)  # the client deadline for `hang`
    key_path, pub = client_key
    other_pub = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()

    async def scenario():
        good = FakeHost({("nvidia-smi",): (SMI, 0)}, {"nvidia-smi"})
        changed = FakeHost({}, set())
        unknown = FakeHost({}, set())
        no_auth = FakeHost({}, set())
        ports = {name: await h.start(pub if name != "no_auth" else other_pub)
                 for name, h in [("good", good), ("changed", changed), ("unknown", unknown), ("no_auth", no_auth)]}
        imposter = asyncssh.generate_private_key("ssh-ed25519")
        known = _known([(ports["good"], good.host_key), (ports["changed"], imposter),
                        (ports["no_auth"], no_auth.host_key)], tmp_path / "known_hosts")
        closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead_port = closed.sockets[0].getsockname()[1]
        closed.close()
        hosts = [Host(name=n, address="127.0.0.1", port=p, key=str(key_path), user="u") for n, p in ports.items()]
        hosts.append(Host(name="down", address="127.0.0.1", port=dead_port, key=str(key_path), user="u"))
        connector = SSHConnector(known_hosts=known, ssh_config=None, connect_timeout_s=5)
        checks = list(catalogue.checks.values())
        try:
            return await diagnose_hosts(hosts, connector, checks, catalogue), good
        finally:
            for h in (good, changed, unknown, no_auth):
                h.close()

    reports, good = asyncio.run(scenario())
    by_name = {r.host: r for r in reports}
    assert by_name["changed"].error_kind == "HostKeyMismatch" and "does NOT match" in by_name["changed"].error
    assert by_name["unknown"].error_kind == "HostKeyMismatch" and "never accepted" in by_name["unknown"].error
    assert by_name["no_auth"].error_kind == "AuthFailed"
    assert by_name["down"].error_kind == "HostUnreachable"
    assert all(not r.checks for r in reports if r.host != "good")
    verdicts = {c.id: (c.verdict, c.message) for c in by_name["good"].checks}
    assert verdicts["gpu.driver"] == ("ok", "driver 550.54.15")
    assert verdicts["gpu.driver_again"] == ("ok", "CUDA 12.4")
    assert verdicts["gpu.hangs"][0] == "timeout" and "no exit status" in verdicts["gpu.hangs"][1]
    assert verdicts["gpu.remote_timeout"] == ("timeout", "no answer within 1 s (killed on the host)")
    assert verdicts["gpu.dcgm"] == ("skipped", "dcgmi not found on the host's PATH")
    assert verdicts["gpu.derived"] == ("ok", "CUDA 12.4 is new enough")
    assert verdicts["gpu.derived_from_hang"][0] == "skipped" and "needs gpu.hangs (timeout" in verdicts["gpu.derived_from_hang"][1]
    # one prerequisite probe, and the shared nvidia-smi command ran once for both checks
    assert sum(1 for c in good.commands if c == ["nvidia-smi"]) == 1
    assert sum(1 for c in good.commands if c[:3] == ["sh", "-s", "--"]) == 1
    assert ["dcgmi", "diag", "-r", "1"] not in good.commands


def test_proxy_jump_reuses_one_bastion_connection(tmp_path, catalogue, client_key):
    key_path, pub = client_key

    async def scenario():
        bastion = FakeHost({}, set())
        targets = [FakeHost({("nvidia-smi",): (SMI, 0)}, {"nvidia-smi"}) for _ in range(3)]
        b_port = await bastion.start(pub, allow_forwarding=True)
        t_ports = [await t.start(pub) for t in targets]
        known = _known([(b_port, bastion.host_key), *zip(t_ports, [t.host_key for t in targets], strict=True)],
                       tmp_path / "known_hosts")
        jump = Host(name="bastion", address="127.0.0.1", port=b_port, key=str(key_path), user="u")
        hosts = [Host(name=f"gpu{i}", address="127.0.0.1", port=p, key=str(key_path), user="u", proxy_jump="bastion")
                 for i, p in enumerate(t_ports)]
        connector = SSHConnector(known_hosts=known, ssh_config=None, jump_hosts={"bastion": jump})
        checks = [catalogue.checks["gpu.driver"]]
        try:
            reports = await diagnose_hosts(hosts, connector, checks, catalogue)
            return reports, bastion.connections, len(connector._tunnels)
        finally:
            for h in (bastion, *targets):
                h.close()

    reports, bastion_connections, tunnels = asyncio.run(scenario())
    assert [r.checks[0].verdict for r in reports] == ["ok", "ok", "ok"]
    assert bastion_connections == 1 and tunnels == 1


def test_ssh_config_proxyjump_is_opened_by_us_with_our_known_hosts(tmp_path, catalogue, client_key):
    key_path, pub = client_key

    async def scenario():
        bastion = FakeHost({}, set())
        target = FakeHost({("nvidia-smi",): (SMI, 0)}, {"nvidia-smi"})
        b_port = await bastion.start(pub, allow_forwarding=True)
        t_port = await target.start(pub)
        known = _known([(b_port, bastion.host_key), (t_port, target.host_key)], tmp_path / "known_hosts")
        config = tmp_path / "ssh_config"
        config.write_text(textwrap.dedent(f"""\
            Host jumpbox
              HostName 127.0.0.1
              Port {b_port}
              User u
              IdentityFile {key_path}
              UserKnownHostsFile none
            Host gpu-*
              HostName 127.0.0.1
              Port {t_port}
              User u
              IdentityFile {key_path}
              ProxyJump jumpbox
              UserKnownHostsFile none
            """))
        connector = SSHConnector(known_hosts=known, ssh_config=config)
        try:
            reports = await diagnose_hosts([Host(name="gpu-a"), Host(name="gpu-b")], connector,
                                           [catalogue.checks["gpu.driver"]], catalogue)
            return reports, bastion.connections
        finally:
            bastion.close()
            target.close()

    reports, connections = asyncio.run(scenario())
    assert [r.checks[0].verdict if r.checks else r.error for r in reports] == ["ok", "ok"]
    assert connections == 1


def test_known_hosts_none_in_ssh_config_cannot_disable_verification(tmp_path, catalogue, client_key):
    key_path, pub = client_key

    async def scenario():
        host = FakeHost({("nvidia-smi",): (SMI, 0)}, {"nvidia-smi"})
        port = await host.start(pub)
        config = tmp_path / "ssh_config"
        config.write_text("Host *\n  UserKnownHostsFile none\n  StrictHostKeyChecking no\n")
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        connector = SSHConnector(known_hosts=empty, ssh_config=config)
        try:
            return await diagnose_hosts([Host(name="h", address="127.0.0.1", port=port, key=str(key_path))],
                                        connector, [catalogue.checks["gpu.driver"]], catalogue)
        finally:
            host.close()

    [report] = asyncio.run(scenario())
    assert report.error_kind == "HostKeyMismatch"


def test_missing_known_hosts_file_is_a_config_error(tmp_path):
    from bot.errors import ConfigError

    with pytest.raises(ConfigError, match="known_hosts file .* does not exist"):
        SSHConnector(known_hosts=tmp_path / "nope", ssh_config=None)


def test_missing_sshd_fails_on_ci_and_skips_locally(monkeypatch):
    import sshd_support

    monkeypatch.setattr(sshd_support, "sshd_path", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must install it"):
        sshd_support.require_sshd()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="openssh-server"):
        sshd_support.require_sshd()
