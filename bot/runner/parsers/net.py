"""Who listens on the serving port: `ss -H -ltnp` lines plus `cmdline PID …` lines (scripts/port_owner.sh)."""

from __future__ import annotations

import re

from bot.runner.parsers.base import Facts, Output, ParseError, parser

_USERS_RE = re.compile(r'\("(?P<name>[^"]*)",pid=(?P<pid>\d+),fd=\d+\)')
_VLLM_RE = re.compile(r"VLLM::|(?:^|/)vllm\s+serve\b|vllm\.entrypoints|-m\s+vllm\b")


@parser("ss_listen", ["listening", "listeners", "owners", "owner_visible", "owner_is_vllm", "addresses"])
def ss_listen(out: Output) -> Facts:
    if out.rc:
        raise ParseError(f"ss failed (rc {out.rc}): {out.stderr.strip()[:200]}")
    cmdlines: dict[str, str] = {}
    sockets: list[str] = []
    for line in out.stdout.splitlines():
        if line.startswith("cmdline "):
            _, pid, *cmd = line.split(" ", 2)
            cmdlines[pid] = (cmd[0] if cmd else "").strip()
        elif line.strip():
            sockets.append(line)
    owners: list[str] = []
    pids: list[tuple[str, str]] = []
    addresses: list[str] = []
    for line in sockets:
        cells = line.split()
        if len(cells) >= 4:
            addresses.append(cells[3])
        for m in _USERS_RE.finditer(line):
            if (m["pid"], m["name"]) not in pids:
                pids.append((m["pid"], m["name"]))
    for pid, name in pids:
        owners.append(f"pid {pid} ({(cmdlines.get(pid) or name)[:100]})")
    return {
        "listening": bool(sockets),
        "listeners": len(sockets),
        "owners": owners,
        "owner_visible": bool(pids),
        "owner_is_vllm": any(_VLLM_RE.search(cmdlines.get(pid) or name) or name == "vllm" for pid, name in pids),
        "addresses": sorted(set(addresses)),
    }
