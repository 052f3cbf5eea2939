"""JSON printed by the Python probe scripts (kb/checks/scripts/probe_*.py) run with the host's Python."""

from __future__ import annotations

import re
import signal
from typing import Any

from packaging.markers import InvalidMarker, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from bot.runner.parsers.base import Facts, Output, load_json, parser
from bot.runner.transport import describe_signal

_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


def arch_supported(capability: str, arch_list: list[str]) -> bool:
    """Can a torch build with `arch_list` run on a GPU of compute capability `capability` ("8.6")?

    cubins (sm_XY) run on the same major with an equal or higher minor; arch-specific cubins (sm_90a) only
    on exactly that GPU; PTX (compute_XY) is JIT-compiled for any equal or newer GPU.
    """
    try:
        major, minor = (int(x) for x in capability.split(".", 1))
    except ValueError:
        return True  # unknown capability: do not accuse the build
    for arch in arch_list:
        m = _ARCH_RE.match(arch)
        if not m:
            continue
        kind, a_major, a_minor, suffix = m[1], int(m[2]), int(m[3]), m[4]
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
        if kind == "sm" and suffix and (a_major, a_minor) == (major, minor):
            return True
        if kind == "sm" and not suffix and a_major == major and a_minor <= minor:
            return True
    return False


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _major(version: str | None) -> int | None:
    """"12.8" -> 12 (major versions compare as numbers, not strings)."""
    if not version:
        return None
    head = str(version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def count_visible_devices(value: str | None) -> int | None:
    """Entries in CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs); None when unset."""
    if value is None:
        return None
    return len([part for part in value.split(",") if part.strip()])


@parser(
    "torch_probe",
    ["python", "installed", "import_error", "version", "cuda", "hip", "cpu_only", "available", "device_count",
     "devices", "capabilities", "min_capability", "arch_list", "arch_unsupported", "cudnn_version", "cudnn_error",
     "nccl_version", "cvd", "cvd_count", "cuda_warning", "cuda_error", "cuda_major"],
)
def torch_probe(out: Output) -> Facts:
    data = load_json(out)
    facts: Facts = {"python": data.get("python"), "cvd": data.get("cuda_visible_devices")}
    facts["cvd_count"] = count_visible_devices(facts["cvd"])
    if data.get("import_error"):
        return {**facts, "installed": "No module named 'torch'" not in data["import_error"],
                "import_error": data["import_error"]}
    devices = data.get("devices") or []
    arch_list = data.get("arch_list") or []
    caps = [str(d.get("capability")) for d in devices]
    numeric_caps = [float(c) for c in caps if _is_float(c)]
    unsupported = [f"GPU{d.get('index')} {d.get('name')} (sm_{str(d.get('capability')).replace('.', '')})"
                   for d in devices if arch_list and not arch_supported(str(d.get("capability")), arch_list)]
    return {
        **facts,
        "installed": True,
        "version": data.get("torch_version"),
        "cuda": data.get("torch_cuda"),
        "cuda_major": _major(data.get("torch_cuda")),
        "hip": data.get("hip"),
        "cpu_only": not data.get("torch_cuda") and not data.get("hip"),
        "available": bool(data.get("cuda_available")),
        "device_count": data.get("device_count", 0),
        "devices": [f"GPU{d.get('index')} {d.get('name')} (compute {d.get('capability')})" for d in devices],
        "capabilities": caps,
        "min_capability": min(numeric_caps) if numeric_caps else None,
        "arch_list": arch_list,
        "arch_unsupported": unsupported,
        "cudnn_version": data.get("cudnn_version"),
        "cudnn_error": data.get("cudnn_error"),
        "nccl_version": data.get("nccl_version"),
        "cuda_warning": data.get("cuda_warning"),
        "cuda_error": data.get("cuda_error"),
    }


def _requirement_problems(
    requires: list[str], versions: dict[str, Any], env: dict[str, str]
) -> tuple[list[str], list[str], str | None]:
    conflicts: list[str] = []
    missing: list[str] = []
    torch_required: str | None = None
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            try:
                if not req.marker.evaluate({**env, "extra": ""}):
                    continue
            except (InvalidMarker, UndefinedEnvironmentName):
                continue
        key = req.name.lower().replace("_", "-")
        installed = versions.get(req.name) or versions.get(key)
        if key == "torch":
            torch_required = str(req.specifier) or "any"
        if installed is None:
            missing.append(f"{req.name}{req.specifier}")
            continue
        try:
            ok = req.specifier.contains(Version(installed), prereleases=True)
        except InvalidVersion:
            continue
        if not ok:
            conflicts.append(f"{req.name} {installed} installed, vllm needs {req.name}{req.specifier}")
    return conflicts, missing, torch_required


@parser(
    "vllm_dist",
    ["installed", "version", "location", "requires_count", "conflicts", "missing", "torch_required",
     "torch_installed", "python"],
)
def vllm_dist(out: Output) -> Facts:
    data = load_json(out)
    env = data.get("env") or {}
    if not data.get("installed"):
        return {"installed": False, "python": data.get("executable")}
    versions = data.get("versions") or {}
    conflicts, missing, torch_required = _requirement_problems(data.get("requires") or [], versions, env)
    return {
        "installed": True,
        "version": data.get("version"),
        "location": data.get("location"),
        "requires_count": len(data.get("requires") or []),
        "conflicts": conflicts,
        "missing": missing,
        "torch_required": torch_required,
        "torch_installed": versions.get("torch"),
        "python": data.get("executable"),
    }


@parser("vllm_import", ["ok", "error", "version", "seconds", "where", "loader", "signal", "crash"])
def vllm_import(out: Output) -> Facts:
    """scripts/probe_vllm_import.py; `signal` (e.g. SIGILL) when the import crashed, `crash` says what
    that signal means for a vLLM host."""
    data = load_json(out)
    facts = {k: data.get(k) for k in ("ok", "error", "version", "seconds", "where", "loader", "signal")}
    name = facts["signal"]
    if isinstance(name, str) and name.startswith("SIG") and name in signal.Signals.__members__:
        facts["crash"] = describe_signal(signal.Signals[name].value)
    elif name is not None:
        facts["crash"] = str(name)
    return facts


@parser("python_runtime", ["version", "implementation", "glibc_version", "libc", "machine", "executable", "in_venv"])
def python_runtime(out: Output) -> Facts:
    data = load_json(out)
    libc = data.get("libc") or ["", ""]
    return {
        "version": data.get("version"),
        "implementation": data.get("implementation"),
        "libc": " ".join(x for x in libc if x) or None,
        "glibc_version": libc[1] if libc and libc[0] == "glibc" and libc[1] else None,
        "machine": data.get("machine"),
        "executable": data.get("executable"),
        "in_venv": data.get("in_venv"),
    }


@parser(
    "model_dir",
    ["exists", "config", "config_error", "architectures", "model_type", "safetensors", "bad", "weights_bytes",
     "missing_shards", "index_error"],
)
def model_dir(out: Output) -> Facts:
    data = load_json(out)
    return {k: data.get(k) for k in ("exists", "config", "config_error", "architectures", "model_type",
                                     "safetensors", "bad", "weights_bytes", "missing_shards", "index_error")}
