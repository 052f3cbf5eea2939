"""Running vLLM processes: `ps -eo pid=,ppid=,etimes=,args=` lines filtered by scripts/vllm_procs.sh."""

from __future__ import annotations

import re

from bot.runner.parsers.base import Facts, Output, ParseError, parser, to_number

_SERVER_RE = re.compile(r"(?:^|/)vllm\s+serve\b|vllm\.entrypoints\.openai\.api_server|vllm\.entrypoints\.api_server")


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _model(args: list[str]) -> str | None:
    explicit = _option(args, "--model")
    if explicit:
        return explicit
    for i, arg in enumerate(args):
        if arg == "serve" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            return args[i + 1]
    return None


def _uptime(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 60}m{seconds % 60}s"


@parser(
    "vllm_processes",
    ["server_count", "servers", "helper_count", "model", "tp", "pp", "port", "gpu_memory_utilization",
     "max_model_len", "enforce_eager", "args"],
)
def vllm_processes(out: Output) -> Facts:
    if out.rc not in (0, 1):  # grep exits 1 when nothing matched
        raise ParseError(f"ps failed (rc {out.rc}): {out.stderr.strip()[:200]}")
    servers, helpers = [], 0
    first: list[str] | None = None
    for line in out.stdout.splitlines():
        cells = line.split(None, 3)
        if len(cells) < 4 or not cells[0].isdigit():
            continue
        pid, _ppid, etimes, command = cells
        if _SERVER_RE.search(command):
            servers.append(f"pid {pid}, up {_uptime(int(to_number(etimes) or 0))}: {command[:400]}")
            first = first or command.split()
        else:
            helpers += 1
    args = first or []
    tp = _option(args, "--tensor-parallel-size", "-tp")
    pp = _option(args, "--pipeline-parallel-size", "-pp")
    port = _option(args, "--port")
    gmu = _option(args, "--gpu-memory-utilization")
    mml = _option(args, "--max-model-len")
    return {
        "server_count": len(servers),
        "servers": servers,
        "helper_count": helpers,
        "model": _model(args),
        "tp": to_number(tp) if tp else (1 if first else None),
        "pp": to_number(pp) if pp else (1 if first else None),
        "port": to_number(port) if port else (8000 if first else None),
        "gpu_memory_utilization": to_number(gmu) if gmu else None,
        "max_model_len": mml,
        "enforce_eager": "--enforce-eager" in args,
        "args": " ".join(args)[:500] or None,
    }
