"""Run the catalogue on this machine (`vllm-doctor diagnose --local`): the same argv lists, exec'd
directly (no shell), each in its own process group so a timeout kills the whole tree."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence

from bot.runner.inventory import Host
from bot.runner.transport import CLIENT_GRACE_S, CommandResult, clip


class LocalSession:
    async def run(self, argv: Sequence[str], *, stdin: str | None, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return CommandResult(None, "", "", time.monotonic() - start, error=f"cannot start {argv[0]}: {exc.strerror}")
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout_s + CLIENT_GRACE_S
            )
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc.pid)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return CommandResult(None, "", "", time.monotonic() - start, client_timeout=True)
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
