"""How the engine talks to a host: open a session, run an argv with a deadline, close.

Two implementations: bot/runner/ssh.py (asyncssh, the only SSH import) and bot/runner/local.py (this
machine). The engine wraps every argv in `timeout -k 5 N` before handing it over, so a transport only adds
its own client-side deadline on top.
"""

from __future__ import annotations

import re
import signal
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
    def signal(self) -> int | None:
        """The signal that ended the command (a negative rc: asyncssh's exit-signal, Popen's returncode)."""
        return -self.rc if self.rc is not None and self.rc < 0 else None

    def timed_out_on_host(self, timeout_s: float) -> bool:
        """GNU timeout exits 124 after SIGTERM, 137 with --foreground. Without --foreground its -k path
        SIGKILLs its whole process group, itself included, so the command ends by signal 9 instead: that
        is a timeout too when the deadline had passed (an earlier SIGKILL is the OOM killer or a person)."""
        if self.rc in (124, 137):
            return True
        return self.signal == signal.SIGKILL and self.duration_s >= timeout_s


# What a crash by signal means for a vLLM host, in the words a user needs (signal(7)).
SIGNAL_MEANING = {
    signal.SIGILL: "Illegal instruction: this build needs CPU features this host lacks (e.g. AVX-512)",
    signal.SIGSEGV: "Segmentation fault: a native library crashed (mismatched builds or a driver bug)",
    signal.SIGBUS: "Bus error: a memory-mapped file was truncated or /dev/shm ran out",
    signal.SIGABRT: "Aborted: a native library gave up (see stderr)",
    signal.SIGFPE: "Floating-point exception in native code",
    signal.SIGKILL: "Killed: out of memory (the kernel's OOM killer) or killed by someone",
}


def describe_signal(number: int) -> str:
    """`SIGILL (Illegal instruction: …)` for a signal number; unknown numbers stay numbers."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    meaning = SIGNAL_MEANING.get(signal.Signals(number))
    return f"{name} ({meaning})" if meaning else name


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


# Terminal control sequences in host output (a GPU name or a log line with colour codes, a cursor move, an
# OSC title or hyperlink) must not reach the operator's terminal or a Slack message: CSI/OSC sequences are
# dropped, any other control character (ESC, BEL, backspace, CR, C1) is shown as an escape, e.g. \x1b.
_TERMINAL_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """Host output made safe to print: terminal sequences removed, other control characters escaped
    (newlines and tabs kept)."""
    if not _CONTROL.search(text):
        return text
    text = _TERMINAL_SEQUENCE.sub("", text.replace("\r\n", "\n"))
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
