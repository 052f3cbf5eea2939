"""Relevant environment variables (scripts/env_relevant.sh prints `NAME=value` lines, already filtered
to the prefixes that matter for vLLM). Values are redacted before they reach a parser; the parser also
never returns a secret-named variable's value."""

from __future__ import annotations

import re
from collections.abc import Callable

from bot.runner.parsers.base import Facts, Output, parser

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_NAME_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.I)

# Left on by accident after debugging, each of these slows inference down a lot (vLLM troubleshooting).
DEBUG_VARS: dict[str, Callable[[str], bool]] = {
    "CUDA_LAUNCH_BLOCKING": lambda v: v not in ("", "0"),
    "VLLM_TRACE_FUNCTION": lambda v: v not in ("", "0"),
    "NCCL_DEBUG": lambda v: v.upper() in ("INFO", "TRACE"),
    "VLLM_LOGGING_LEVEL": lambda v: v.upper() == "DEBUG",
    "TORCH_COMPILE_DEBUG": lambda v: v not in ("", "0"),
}
# DCGM's software test warns on any of these: they make CUDA run under a debugger/profiler hook.
CUDA_DEBUG_VARS = (
    "NSIGHT_CUDA_DEBUGGER", "CUDA_INJECTION32_PATH", "CUDA_INJECTION64_PATH", "CUDA_AUTO_BOOST",
    "CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "CUDA_COREDUMP_FILE", "CUDA_DEVICE_WAITS_ON_EXCEPTION",
    "CUDA_PROFILE", "COMPUTE_PROFILE", "OPENCL_PROFILE",
)  # fmt: skip
# NCCL workarounds that stay behind after a hang was "fixed" and later cost bandwidth or cause hangs.
NCCL_LEFTOVERS = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_CUMEM_ENABLE",
                  "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL")
HF_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@parser(
    "env",
    ["names", "cvd", "cvd_count", "cvd_max_index", "debug_set", "cuda_debug_set", "nccl_set", "hf_offline",
     "hf_token_set", "hf_token_var"],
    maps=("vars",),
)
def env(out: Output) -> Facts:
    variables: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and _NAME_RE.match(name):  # continuation lines of multi-line values are dropped
            variables[name] = value
    cvd = variables.get("CUDA_VISIBLE_DEVICES")
    indices = [int(p) for p in (cvd or "").split(",") if p.strip().isdigit()]
    token_var = next((name for name in HF_TOKEN_VARS if variables.get(name)), None)
    shown = {k: ("[masked]" if _SECRET_NAME_RE.search(k) else v) for k, v in variables.items()}
    return {
        "vars": shown,
        "names": sorted(variables),
        "cvd": cvd,
        "cvd_count": None if cvd is None else len([p for p in cvd.split(",") if p.strip()]),
        "cvd_max_index": max(indices) if indices else None,
        "debug_set": [f"{k}={variables[k]}" for k, bad in DEBUG_VARS.items() if k in variables and bad(variables[k])],
        "cuda_debug_set": [k for k in CUDA_DEBUG_VARS if variables.get(k)],
        "nccl_set": [f"{k}={variables[k]}" for k in NCCL_LEFTOVERS if k in variables],
        "hf_offline": _truthy(variables.get("HF_HUB_OFFLINE")) or _truthy(variables.get("TRANSFORMERS_OFFLINE")),
        "hf_token_set": token_var is not None,
        "hf_token_var": token_var,
    }
