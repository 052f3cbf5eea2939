"""Kernel and NVIDIA service state: Xid lines from dmesg, `dcgmi diag` tables."""

from __future__ import annotations

import re

from bot.runner.parsers.base import Facts, Output, ParseError, parser

_XID_RE = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)")
# Xids that mean hardware trouble or a GPU that needs a reset (NVIDIA Xid catalogue).
FATAL_XIDS = {
    48: "double-bit ECC error", 63: "ECC page retirement / row remap event", 64: "ECC row remap failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}


@parser("xid", ["count", "xids", "fatal", "last"])
def xid(out: Output) -> Facts:
    if out.rc not in (0, 1):  # grep: 1 = no Xid lines
        raise ParseError(f"dmesg failed (rc {out.rc}): {out.stderr.strip()[:200]} (tier 1: needs root or "
                         "kernel.dmesg_restrict=0)")
    codes: list[int] = []
    fatal: list[str] = []
    last = None
    count = 0
    for line in out.stdout.splitlines():
        m = _XID_RE.search(line)
        if not m:
            continue
        count += 1
        code = int(m["code"])
        last = line.strip()[:300]
        if code not in codes:
            codes.append(code)
            if code in FATAL_XIDS:
                fatal.append(f"Xid {code} on {m['pci']}: {FATAL_XIDS[code]}")
    return {"count": count, "xids": sorted(codes), "fatal": fatal, "last": last}


@parser("dcgm_diag", ["fails", "warns", "passes"])
def dcgm_diag(out: Output) -> Facts:
    fails, warns, passes = [], [], 0
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2:
            continue
        name, result = cells
        if result.startswith("Fail"):
            fails.append(name)
        elif result.startswith("Warn"):
            warns.append(name)
        elif result.startswith("Pass"):
            passes += 1
    if not (fails or warns or passes):
        raise ParseError(f"no result table in dcgmi diag output (rc {out.rc})")
    return {"fails": fails, "warns": warns, "passes": passes}
