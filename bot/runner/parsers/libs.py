"""Shared libraries and toolkits: `ldconfig -p`, `nvcc --version`."""

from __future__ import annotations

import re

from bot.runner.parsers.base import Facts, Output, ParseError, parser

_LDCONFIG_LINE = re.compile(r"^\s*(?P<soname>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S+)")


def _sonames(entries: list[tuple[str, str]], prefix: str) -> list[str]:
    out: list[str] = []
    for soname, _ in entries:
        if soname.startswith(prefix + ".so") and soname not in out:
            out.append(soname)
    return out


def _majors(sonames: list[str]) -> list[str]:
    majors: list[str] = []
    for name in sonames:
        m = re.search(r"\.so\.(\d+)", name)
        if m and m.group(1) not in majors:
            majors.append(m.group(1))
    return majors


@parser("ldconfig", ["lib_count", "cudnn", "cudnn_majors", "cudnn_major_count", "nccl", "cudart", "cublas", "libcuda", "libcuda_paths"])
def ldconfig(out: Output) -> Facts:
    entries = []
    for line in out.stdout.splitlines():
        m = _LDCONFIG_LINE.match(line)
        if m:
            entries.append((m["soname"], m["path"]))
    if not entries and out.rc:
        raise ParseError(f"ldconfig -p failed (rc {out.rc})")
    cudnn = _sonames(entries, "libcudnn")
    libcuda_paths = [path for soname, path in entries if soname.startswith("libcuda.so")]
    return {
        "lib_count": len(entries),
        "cudnn": cudnn,
        "cudnn_majors": _majors(cudnn),
        "cudnn_major_count": len(_majors(cudnn)),
        "nccl": _sonames(entries, "libnccl"),
        "cudart": _sonames(entries, "libcudart"),
        "cublas": _sonames(entries, "libcublas"),
        "libcuda": bool(libcuda_paths),
        "libcuda_paths": sorted(set(libcuda_paths)),
    }


@parser("nvcc_version", ["release", "build"])
def nvcc_version(out: Output) -> Facts:
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out.stdout)
    if not m:
        raise ParseError("no 'release X.Y, VX.Y.Z' line in nvcc --version output")
    return {"release": m.group(1), "build": m.group(2)}
