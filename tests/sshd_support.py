"""A real OpenSSH sshd for tests and benchmarks: generated keys, loopback addresses, a free high port.

    harness = start_sshd(tmp_dir, {"127.0.0.2": {"PATH": "...", "FOO": "bar"}, "127.0.0.3": {}})
    ... connect to [127.0.0.2]:harness.port as harness.user with harness.client_key,
        verifying against harness.known_hosts ...
    harness.stop()

Per-address behaviour comes from `Match LocalAddress <addr>` + `SetEnv` blocks in sshd_config (OpenSSH
8.7+): the same daemon, user and key give each address its own environment. That is how each test "host"
gets its own fake GPU stack (tests/runner_fixtures/README.md) without network namespaces or root-owned
per-user setup. sshd accepts at most 16 ListenAddress lines, so more addresses start more daemons (all on
the same port, each on its own addresses). Every daemon is stopped by its pid file.

Works as root (CI) and as an ordinary user (sshd then only lets that same user in).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

MAX_LISTEN = 16  # sshd's MAX_LISTEN_SOCKS


def in_ci() -> bool:
    """CI=true, CI=1 or CI=yes (any case): CI providers differ, and a skip there would hide a broken setup."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def sshd_path() -> str | None:
    return shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/sbin/sshd") if os.access(p, os.X_OK)), None)


def require_sshd() -> str:
    """The sshd binary, or skip — but FAIL on CI (CI=true/1/yes), where a missing sshd is a broken setup."""
    path = sshd_path()
    if path and shutil.which("ssh-keygen"):
        return path
    message = "OpenSSH sshd/ssh-keygen not installed (apt-get install -y openssh-server)"
    if in_ci():
        pytest.fail(message + "; CI must install it", pytrace=False)
    pytest.skip(message)


def _free_port(addresses: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        if port < 20000:
            continue
        try:
            for addr in addresses:
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((addr, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port on all addresses")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@dataclass
class SshdHarness:
    directory: Path
    port: int
    addresses: list[str]
    user: str
    client_key: Path
    known_hosts: Path
    host_key_line: str  # "ssh-ed25519 AAAA…"
    pid_files: list[Path] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def stop(self) -> None:
        for pid_file in self.pid_files:
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)


def _env_line(env: dict[str, str]) -> str:
    parts = []
    for key, value in env.items():
        if any(c in value for c in ' "\\'):
            raise ValueError(f"SetEnv value for {key} must not contain spaces, quotes or backslashes")
        parts.append(f"{key}={value}")
    return "SetEnv " + " ".join(parts)


def start_sshd(directory: Path, hosts: dict[str, dict[str, str]], *, extra_config: str = "") -> SshdHarness:
    """Start sshd on every address in `hosts` (127.0.0.x), giving each address the environment variables
    mapped to it. Returns once every address accepts connections."""
    sshd = require_sshd()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation dir sshd insists on
    host_line = _keygen(directory / "host_ed25519")
    _keygen(directory / "client_ed25519")
    (directory / "authorized_keys").write_text((directory / "client_ed25519.pub").read_text())
    addresses = list(hosts)
    port = _free_port(addresses)
    user = "root" if os.geteuid() == 0 else os.environ.get("USER") or subprocess.check_output(["id", "-un"], text=True).strip()
    harness = SshdHarness(directory, port, addresses, user, directory / "client_ed25519", directory / "known_hosts", host_line)
    harness.known_hosts.write_text("".join(f"[{addr}]:{port} {host_line}\n" for addr in addresses))
    for n, start in enumerate(range(0, len(addresses), MAX_LISTEN)):
        chunk = addresses[start : start + MAX_LISTEN]
        config = directory / f"sshd_config.{n}"
        pid_file = directory / f"sshd.{n}.pid"
        log = directory / f"sshd.{n}.log"
        lines = [*(f"ListenAddress {a}" for a in chunk), f"Port {port}",
                 f"HostKey {directory / 'host_ed25519'}", f"PidFile {pid_file}",
                 f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                 "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no", "LogLevel VERBOSE",
                 extra_config]
        for addr in chunk:
            if hosts[addr]:
                lines += [f"Match LocalAddress {addr}", "  " + _env_line(hosts[addr])]
        config.write_text("\n".join(lines) + "\n")
        subprocess.run([sshd, "-t", "-f", str(config)], check=True, capture_output=True)
        subprocess.run([sshd, "-f", str(config), "-E", str(log)], check=True)
        harness.pid_files.append(pid_file)
        harness.logs.append(log)
    deadline = time.monotonic() + 10
    for addr in addresses:
        while True:
            try:
                socket.create_connection((addr, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    harness.stop()
                    raise RuntimeError(f"sshd did not come up on {addr}:{port}:\n{harness.log_text()}") from None
                time.sleep(0.05)
    return harness
