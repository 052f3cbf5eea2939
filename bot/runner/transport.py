"""How the engine talks to a host: open a session, run an argv with a deadline, close.

Two implementations: bot/runner/ssh.py (asyncssh, the only SSH import) and bot/runner/local.py (this
machine). The engine wraps every argv in `timeout -k 5 N` before handing it over, so a transport only adds
its own client-side deadline on top.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.runner.inventory import Host

MAX_OUTPUT_CHARS = 4 * 1024 * 1024  # per stream; a /metrics page is ~100 kB
CLIENT_GRACE_S = 8.0  # client deadline = remote timeout + kill grace (5 s) + slack


@dataclass(frozen=True)
class CommandResult:
    rc: int | None  # None: no exit status (client deadline hit, channel lost)
    stdout: str
    stderr: str
    duration_s: float
    client_timeout: bool = False
    error: str | None = None  # transport-level problem with this one command

    @property
    def remote_timeout(self) -> bool:
        """GNU timeout exits 124 after SIGTERM, 137 (128+9) when it had to SIGKILL."""
        return self.rc in (124, 137)


class Session(Protocol):
    async def run(self, argv: Sequence[str], *, stdin: str | None, timeout_s: float) -> CommandResult: ...

    async def close(self) -> None: ...


class Connector(Protocol):
    async def open(self, host: Host) -> Session:
        """Connect and authenticate; raises bot.errors.RunnerError subclasses for the host."""
        ...

    async def close(self) -> None: ...


def clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n[… output cut at {MAX_OUTPUT_CHARS} characters]"
