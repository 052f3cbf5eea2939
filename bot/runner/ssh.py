"""SSH transport on asyncssh — the only module that imports it.

Safety and robustness choices (tested facts in docs/runner.md):
- Host keys are always checked against an explicit known_hosts file. We never pass known_hosts=None, so a
  `UserKnownHostsFile none` in ssh_config cannot switch verification off; an unknown or changed key is a
  HostKeyMismatch for that host, never accepted.
- ProxyJump (from the inventory or ssh_config) goes through ONE connection per jump spec, shared by all
  targets behind it; asyncssh would otherwise open one bastion connection per target, and its own jump
  connection would not use our known_hosts.
- New connections are throttled by a semaphore: sshd's MaxStartups (default 10:30:100) drops bursts of
  unauthenticated connections. Channels per connection are bounded below sshd's MaxSessions (10).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import asyncssh

from bot.errors import AuthFailed, ConfigError, HostKeyMismatch, HostUnreachable, RunnerError
from bot.runner.inventory import Host
from bot.runner.transport import CLIENT_GRACE_S, CommandResult, clip

CLOSE_WAIT_S = 5.0  # how long to wait for sshd to confirm an abandoned channel's close
_HOP_RE = re.compile(r"^(?:(?P<user>[^@]+)@)?(?P<host>[^:@]+)(?::(?P<port>\d+))?$")


class SSHSession:
    def __init__(self, conn: asyncssh.SSHClientConnection, max_channels: int,
                 reconnect: Callable[[], Awaitable[asyncssh.SSHClientConnection]] | None = None):
        self._conn = conn
        self._channels = asyncio.Semaphore(max_channels)
        self._reconnect = reconnect
        self._abandoned = 0  # commands given up on this connection whose session may still live on the host
        self._spent: list[asyncssh.SSHClientConnection] = []  # connections replaced because of them
        self._reconnecting = asyncio.Lock()

    async def _open(self, command: str, stdin: str | None) -> asyncssh.SSHClientProcess[str]:
        conn = self._conn
        try:
            return await conn.create_process(command, input=stdin, encoding="utf-8", errors="replace")
        except asyncssh.ChannelOpenError:
            # A command we gave up on can outlive our kill (sshd refuses `signal` requests for some logins,
            # or the process is stuck in the kernel); its session then still counts against MaxSessions.
            # Sessions are per connection: carry on over a fresh one instead of failing every later check.
            if self._reconnect is None:
                raise
            async with self._reconnecting:
                if conn is self._conn:
                    if not self._abandoned:
                        raise
                    self._abandoned = 0
                    self._conn = await self._reconnect()
                    self._spent.append(conn)
            return await self._conn.create_process(command, input=stdin, encoding="utf-8", errors="replace")

    async def run(self, argv: Sequence[str], *, stdin: str | None, timeout_s: float) -> CommandResult:
        # The remote side runs this through the login shell; every word is quoted, so values from the
        # inventory cannot change the command's shape. Chat text never gets here (see bot/runner/access.py).
        command = shlex.join(argv)
        async with self._channels:
            start = time.monotonic()
            try:
                process = await self._open(command, stdin)
            except asyncssh.ChannelOpenError as exc:
                return CommandResult(None, "", "", time.monotonic() - start,
                                     error=f"could not open an SSH session channel: {exc.reason}")
            except (asyncssh.Error, OSError, RunnerError) as exc:
                return CommandResult(None, "", "", time.monotonic() - start, error=f"SSH error: {exc}")
            try:
                result = await process.wait(check=False, timeout=timeout_s + CLIENT_GRACE_S)
            except asyncssh.TimeoutError as exc:
                # asyncssh leaves the channel open after its timeout, and sshd counts an open channel
                # against MaxSessions for as long as it lives: kill what still runs in the session and
                # close the channel BEFORE the slot is given back, or later checks fail "open failed".
                await self._abandon(process)
                return CommandResult(None, clip(str(exc.stdout or "")), clip(str(exc.stderr or "")),
                                     time.monotonic() - start, client_timeout=True)
            except (asyncssh.Error, OSError) as exc:
                await self._abandon(process)
                return CommandResult(None, "", "", time.monotonic() - start, error=f"SSH error: {exc}")
            except BaseException:  # cancelled (Ctrl-C, SIGTERM): do not leave the channel running either
                process.close()
                raise
        rc = result.returncode
        return CommandResult(
            rc if rc is not None else -1,
            clip(str(result.stdout or "")),
            clip(str(result.stderr or "")),
            time.monotonic() - start,
        )

    async def _abandon(self, process: asyncssh.SSHClientProcess[str]) -> None:
        """End a command that gave no answer: SIGKILL its session's process group (sshd's `signal`
        request, OpenSSH 8.1+; older servers ignore it), then close the channel and wait a moment for
        sshd to confirm, so the session no longer counts against MaxSessions."""
        try:
            process.send_signal("KILL")
        except (asyncssh.Error, OSError, ValueError):
            pass
        process.close()
        self._abandoned += 1
        try:
            await asyncio.wait_for(process.wait_closed(), CLOSE_WAIT_S)
        except (TimeoutError, asyncssh.Error, OSError):
            pass

    async def close(self) -> None:
        for conn in (*self._spent, self._conn):
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except (TimeoutError, asyncssh.Error, OSError):
                pass


class SSHConnector:
    """Opens verified SSH connections to inventory hosts; one instance per diagnosis run."""

    def __init__(
        self,
        *,
        known_hosts: Path | str,
        ssh_config: Path | str | None,
        connect_timeout_s: float = 10.0,
        max_connecting: int = 8,
        max_channels_per_host: int = 6,
        jump_hosts: dict[str, Host] | None = None,
    ):
        known_hosts = Path(known_hosts).expanduser()
        if not known_hosts.is_file():
            raise ConfigError(
                f"known_hosts file {known_hosts} does not exist. Record each host's key first (check the "
                "fingerprint out of band), e.g. `ssh-keyscan -H HOST >> FILE`, or set VLLM_DOCTOR_KNOWN_HOSTS."
            )
        self._known_hosts = str(known_hosts)
        if ssh_config is not None:
            config_path = Path(ssh_config).expanduser()
            if not config_path.is_file():
                raise ConfigError(f"ssh config {config_path} does not exist (VLLM_DOCTOR_SSH_CONFIG)")
            self._config: list[str] = [str(config_path)]
        else:
            default = Path("~/.ssh/config").expanduser()
            self._config = [str(default)] if default.is_file() else []
        self._connect_timeout = connect_timeout_s
        self._max_channels = max_channels_per_host
        self._connecting = asyncio.Semaphore(max_connecting)
        self._jump_hosts = jump_hosts or {}
        self._tunnels: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._sessions: list[SSHSession] = []

    async def open(self, host: Host) -> SSHSession:
        tunnel = await self._tunnel_for(host)
        conn = await self._connect(host, tunnel)

        async def reconnect() -> asyncssh.SSHClientConnection:
            return await self._connect(host, tunnel)

        session = SSHSession(conn, self._max_channels, reconnect)
        self._sessions.append(session)
        return session

    async def close(self) -> None:
        for session in self._sessions:
            await session.close()
        for task in self._tunnels.values():
            if task.done() and not task.cancelled() and task.exception() is None:
                task.result().close()
            elif not task.done():
                task.cancel()

    # --- connecting -----------------------------------------------------------------------------------
    async def _connect(self, host: Host, tunnel: asyncssh.SSHClientConnection | None) -> asyncssh.SSHClientConnection:
        where = host.connect_to + (f":{host.port}" if host.port else "")
        async with self._connecting:
            try:
                return await asyncssh.connect(
                    host.connect_to,
                    port=host.port or (),
                    username=host.user or (),
                    client_keys=[host.key] if host.key else (),
                    known_hosts=self._known_hosts,
                    config=self._config,
                    tunnel=tunnel,
                    connect_timeout=self._connect_timeout,
                )
            except asyncssh.HostKeyNotVerifiable as exc:
                raise HostKeyMismatch(self._host_key_message(host, where)) from exc
            except asyncssh.PermissionDenied as exc:
                user = host.user or "the configured user"
                raise AuthFailed(f"{host.name}: SSH authentication failed for {user}@{where} ({exc.reason})") from exc
            except TimeoutError as exc:
                raise HostUnreachable(f"{host.name}: no SSH answer from {where} within {self._connect_timeout:g} s") from exc
            except asyncssh.DisconnectError as exc:
                raise HostUnreachable(f"{host.name}: {where} closed the SSH connection ({exc.reason})") from exc
            except asyncssh.Error as exc:
                raise HostUnreachable(f"{host.name}: SSH to {where} failed: {exc}") from exc
            except FileNotFoundError as exc:
                raise AuthFailed(f"{host.name}: key file {exc.filename} does not exist") from exc
            except OSError as exc:
                raise HostUnreachable(f"{host.name}: cannot reach {where}: {exc.strerror or exc}") from exc
            except ValueError as exc:  # asyncssh raises it for bad key files and config values
                raise RunnerError(f"{host.name}: SSH settings rejected: {exc}") from exc

    def _host_key_message(self, host: Host, where: str) -> str:
        known: tuple[Sequence[object], ...]  # match() gives 7 sequences (keys, certs, patterns); [0]: host keys
        try:
            known = asyncssh.read_known_hosts(self._known_hosts).match(host.connect_to, host.connect_to, host.port)
        except (OSError, ValueError):
            known = ((),)
        if known[0]:
            return (f"{host.name}: the host key of {where} does NOT match the one in {self._known_hosts}. The host "
                    "was reinstalled or someone is intercepting the connection; verify the new key out of band "
                    "before replacing the entry.")
        port = f"-p {host.port} " if host.port and host.port != 22 else ""
        return (f"{host.name}: {where} is not in {self._known_hosts}; unknown host keys are never accepted. "
                f"Verify its fingerprint and add it (ssh-keyscan {port}-H {host.connect_to} >> {self._known_hosts}).")

    async def _tunnel_for(self, host: Host) -> asyncssh.SSHClientConnection | None:
        spec = host.proxy_jump or self._config_jump(host)
        if not spec:
            return None
        task = self._tunnels.get(spec)
        if task is None:
            task = asyncio.ensure_future(self._open_tunnel(spec))
            self._tunnels[spec] = task
        try:
            return await asyncio.shield(task)
        except RunnerError as exc:
            raise HostUnreachable(f"{host.name}: jump host {spec} failed: {exc}") from exc

    def _config_jump(self, host: Host) -> str | None:
        """ProxyJump that ssh_config gives this host (we open it ourselves, see the module docstring)."""
        if not self._config:
            return None
        try:
            options = asyncssh.SSHClientConnectionOptions(
                config=self._config, host=host.connect_to, port=host.port or (), username=host.user or (),
                known_hosts=self._known_hosts, client_keys=None,
            )  # fmt: skip
        except (OSError, ValueError, asyncssh.Error):
            return None
        tunnel = options.tunnel
        return tunnel if isinstance(tunnel, str) and tunnel.lower() != "none" else None

    async def _open_tunnel(self, spec: str) -> asyncssh.SSHClientConnection:
        conn: asyncssh.SSHClientConnection | None = None
        for hop in spec.split(","):
            jump = self._jump_hosts.get(hop)
            if jump is None:
                m = _HOP_RE.match(hop.strip())
                if not m:
                    raise ConfigError(f"bad ProxyJump hop {hop!r}")
                jump = Host(name=hop, address=m["host"], user=m["user"], port=int(m["port"]) if m["port"] else None)
            conn = await self._connect(jump, conn)
        assert conn is not None
        return conn
