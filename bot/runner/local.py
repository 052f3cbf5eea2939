"""Run the catalogue on this machine (`vllm-doctor diagnose --local`): the same argv lists, exec'd
directly (no shell), each in its own process group so a timeout kills the whole tree."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from bot.runner.inventory import Host
from bot.runner.transport import CLIENT_GRACE_S, CommandResult, clip

# bot/cli/main.py sets these (setdefault) for the doctor's OWN model loading. A local probe must see the
# user's environment, not ours: drop them unless they were there when this process started.
_DOCTOR_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _startup_names() -> set[str] | None:
    """Names in the environment this process was started with (Linux /proc), None if unknown."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return None
    return {item.split(b"=", 1)[0].decode("utf-8", "replace") for item in raw.split(b"\0") if b"=" in item}


def probe_environment() -> dict[str, str]:
    env = dict(os.environ)
    startup = _startup_names()
    if startup is not None:
        for name, value in _DOCTOR_DEFAULTS.items():
            if env.get(name) == value and name not in startup:
                del env[name]
    return env


class LocalSession:
    def __init__(self) -> None:
        self._env = probe_environment()

    async def run(self, argv: Sequence[str], *, stdin: str | None, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=self._env,
            )
        except OSError as exc:
            return CommandResult(None, "", "", time.monotonic() - start, error=f"cannot start {argv[0]}: {exc.strerror}")
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout_s + CLIENT_GRACE_S
            )
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return CommandResult(None, "", "", time.monotonic() - start, client_timeout=True)
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            await proc.wait()
            raise
        except BaseException:  # SystemExit/KeyboardInterrupt raised inside this step (CLI SIGTERM, Ctrl-C)
            _kill_group(proc.pid)
            raise
        return CommandResult(
            proc.returncode,
            clip(out.decode("utf-8", "replace")),
            clip(err.decode("utf-8", "replace")),
            time.monotonic() - start,
        )

    async def close(self) -> None:
        return None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class LocalConnector:
    async def open(self, host: Host) -> LocalSession:
        return LocalSession()

    async def close(self) -> None:
        return None
