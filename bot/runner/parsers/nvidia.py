"""nvidia-smi outputs: the plain table header, --query-gpu CSV, -q sections, topo -m, compute apps."""

from __future__ import annotations

import re
from typing import Any

from bot.runner.parsers.base import Facts, Output, ParseError, Unavailable, error_line, parser, to_number

_HEADER_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+Driver Version:\s*(?P<driver>[\d.]+)\s+CUDA Version:\s*(?P<cuda>[\d.]+|N/A)"
)
# Messages nvidia-smi prints instead of the table; kept verbatim as the `error` fact.
_SMI_ERRORS = (
    "Driver/library version mismatch",
    "couldn't communicate with the NVIDIA driver",
    "No devices were found",
    "Failed to initialize NVML",
    "Unable to determine the device handle",
    "GPU is lost",
)


def _smi_error(out: Output) -> str | None:
    text = out.stdout + "\n" + out.stderr
    for marker in _SMI_ERRORS:
        for line in text.splitlines():
            if marker in line:
                return line.strip()
    return error_line(out) if out.rc else None


def _require_driver(out: Output) -> None:
    """Checks other than gpu.driver are skipped, not errors, when nvidia-smi cannot reach the driver:
    gpu.driver (and gpu.inventory) report that one cause with its KB case."""
    if not out.rc:
        return
    text = out.stdout + "\n" + out.stderr
    for marker in _SMI_ERRORS:
        for line in text.splitlines():
            if marker in line:
                raise Unavailable(f"nvidia-smi cannot use the driver ({line.strip()[:160]}); see gpu.driver")


@parser("nvidia_smi_header", ["driver_version", "cuda_version", "cuda_major", "smi_version", "error"])
def nvidia_smi_header(out: Output) -> Facts:
    m = _HEADER_RE.search(out.stdout)
    if not m:
        error = _smi_error(out)
        if error is None:
            raise ParseError("no 'Driver Version … CUDA Version' header in nvidia-smi output")
        return {"error": error}
    cuda = m["cuda"] if m["cuda"] != "N/A" else None
    return {"driver_version": m["driver"], "cuda_version": cuda, "cuda_major": int(cuda.split(".")[0]) if cuda else None,
            "smi_version": m["smi"], "error": _smi_error(out)}


def _csv_rows(out: Output, columns: int) -> list[list[str]]:
    rows = []
    for line in out.stdout.splitlines():
        if not line.strip() or "No devices were found" in line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < columns:
            raise ParseError(f"expected {columns} comma-separated fields, got: {line.strip()[:200]}")
        if len(cells) > columns:  # a GPU name with a comma: rejoin the surplus into the second field
            extra = len(cells) - columns
            cells = [cells[0], ", ".join(cells[1 : 2 + extra]), *cells[2 + extra :]]
        rows.append(cells)
    return rows


@parser(
    "nvidia_smi_gpus",
    ["gpu_count", "gpus", "names", "memory_total_mib", "memory_used_mib", "busiest_gpu", "compute_caps", "per_gpu",
     "error"],
)
def nvidia_smi_gpus(out: Output) -> Facts:
    """scripts/gpu_inventory.sh: --query-gpu=index,name,pci.bus_id,memory.total,memory.used,compute_cap
    (csv, noheader, nounits); compute_cap is [N/A] on drivers that cannot report it (R470)."""
    if out.rc and "No devices were found" not in out.stdout + out.stderr:
        return {"error": _smi_error(out)}
    rows = _csv_rows(out, 6)
    gpus, caps, names = [], [], []
    totals, used = [], []
    busiest, busiest_used = None, -1.0
    per_gpu: list[dict[str, object]] = []  # for the memory picture (bot/present/memory_view.py)
    for index, name, bus_id, total, mem_used, cap in rows:
        total_n, used_n = to_number(total), to_number(mem_used)
        per_gpu.append({"index": index, "name": name, "total_mib": total_n, "used_mib": used_n})
        gpus.append(f"GPU{index} {name} ({bus_id}, {total} MiB)")
        if name not in names:
            names.append(name)
        if cap and not cap.startswith("["):  # [N/A]
            caps.append(cap)
        if total_n is not None:
            totals.append(total_n)
        if used_n is not None:
            used.append(used_n)
            if used_n > busiest_used:
                busiest, busiest_used = f"GPU{index}: {mem_used} of {total} MiB used", used_n
    return {
        "gpu_count": len(rows),
        "gpus": gpus,
        "names": names,
        "memory_total_mib": min(totals) if totals else None,
        "memory_used_mib": max(used) if used else None,
        "busiest_gpu": busiest,
        "compute_caps": caps,
        "per_gpu": per_gpu,
        "error": None,
    }


@parser("nvidia_smi_modes", ["persistence_off", "exclusive", "mig_enabled", "gpu_count"])
def nvidia_smi_modes(out: Output) -> Facts:
    """--query-gpu=index,persistence_mode,compute_mode,mig.mode.current --format=csv,noheader"""
    _require_driver(out)
    rows = _csv_rows(out, 4)
    persistence_off, exclusive, mig = [], [], []
    for index, persistence, compute, mig_mode in rows:
        if persistence == "Disabled":
            persistence_off.append(f"GPU{index}")
        if compute in ("Exclusive_Process", "Exclusive_Thread", "Prohibited"):
            exclusive.append(f"GPU{index} ({compute})")
        if mig_mode == "Enabled":
            mig.append(f"GPU{index}")
    return {"persistence_off": persistence_off, "exclusive": exclusive, "mig_enabled": mig, "gpu_count": len(rows)}


# clocks_event_reasons bit mask (nvml.h NVML_CLOCKS_EVENT_REASON_*); idle, app-clock and SW power cap
# are normal under load and not reported.
_THROTTLE_BITS = {0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                  0x80: "HW power brake"}


@parser("nvidia_smi_throttle", ["throttled", "max_temp_c"])
def nvidia_smi_throttle(out: Output) -> Facts:
    """scripts/gpu_throttle.sh: --query-gpu=index,clocks_event_reasons.active,temperature.gpu (csv, noheader);
    clocks_throttle_reasons.active on drivers before R535 (same bits)."""
    _require_driver(out)
    rows = _csv_rows(out, 3)
    throttled, temps = [], []
    for index, mask, temp in rows:
        try:
            bits = int(mask, 16)
        except ValueError:
            bits = 0  # [N/A] on GPUs that do not report it
        reasons = [label for bit, label in _THROTTLE_BITS.items() if bits & bit]
        if reasons:
            throttled.append(f"GPU{index}: {', '.join(reasons)}")
        t = to_number(temp)
        if t is not None:
            temps.append(t)
    return {"throttled": throttled, "max_temp_c": max(temps) if temps else None}


@parser(
    "nvidia_smi_ecc",
    ["uncorrectable_volatile", "uncorrectable_aggregate", "retired_pending", "remap_pending", "remap_failed",
     "ecc_disabled", "gpu_count"],
)
def nvidia_smi_ecc(out: Output) -> Facts:
    """`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`: indented `Key : Value` lines per GPU."""
    _require_driver(out)
    gpus: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, section name)
    volatile = aggregate = 0
    retired_pending, remap_pending, remap_failed, ecc_disabled = [], [], [], []
    for raw in out.stdout.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if line.startswith("GPU ") and indent == 0:
            gpus.append(line[4:].strip())
            stack = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            stack.append((indent, line.rstrip(":").strip()))
            continue
        if not gpus:
            continue  # the log header (Timestamp, Driver Version …)
        gpu = gpus[-1]
        path = [name for _, name in stack]
        count = to_number(value)
        uncorrectable = "Uncorrectable" in key or ("Double Bit" in path and key == "Total")
        if isinstance(count, int) and uncorrectable and "ECC Errors" in path:
            if "Volatile" in path:
                volatile += count
            elif "Aggregate" in path:
                aggregate += count
        if path[-1:] == ["Retired Pages"] and key.startswith("Pending") and value == "Yes":
            retired_pending.append(gpu)
        if path[-1:] == ["Remapped Rows"]:
            if key == "Pending" and value == "Yes":
                remap_pending.append(gpu)
            if key == "Remapping Failure Occurred" and value == "Yes":
                remap_failed.append(gpu)
        if path[-1:] == ["ECC Mode"] and key == "Current" and value == "Disabled":
            ecc_disabled.append(gpu)
    if not gpus:
        raise ParseError("no 'GPU <bus id>' sections in nvidia-smi -q output")
    return {
        "uncorrectable_volatile": volatile,
        "uncorrectable_aggregate": aggregate,
        "retired_pending": retired_pending,
        "remap_pending": remap_pending,
        "remap_failed": remap_failed,
        "ecc_disabled": ecc_disabled,
        "gpu_count": len(gpus),
    }


@parser("nvidia_smi_topo", ["gpu_count", "nvlink_pairs", "pcie_pairs", "cross_socket_pairs", "links"])
def nvidia_smi_topo(out: Output) -> Facts:
    """`nvidia-smi topo -m`: a GPU x GPU matrix of link types (X, NV#, PIX, PXB, PHB, NODE, SYS)."""
    _require_driver(out)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    header = next((ln for ln in lines if re.match(r"^\s+GPU0\b", ln)), None)
    if header is None:
        raise ParseError("no GPU matrix header in nvidia-smi topo -m output")
    gpu_cols = [int(c[3:]) for c in header.split() if re.fullmatch(r"GPU\d+", c)]
    nvlink = pcie = cross = 0
    kinds: set[str] = set()
    for line in lines:
        cells = line.split()
        if line is header or not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = int(cells[0][3:])
        for col, link in zip(gpu_cols, cells[1 : 1 + len(gpu_cols)], strict=False):
            if col <= row or link == "X":
                continue  # each pair once
            kinds.add(link)
            if link.startswith("NV"):
                nvlink += 1
            elif link == "SYS":
                cross += 1
            else:
                pcie += 1
    return {"gpu_count": len(gpu_cols), "nvlink_pairs": nvlink, "pcie_pairs": pcie,
            "cross_socket_pairs": cross, "links": sorted(kinds)}


# A vLLM process: the API server (`vllm serve`, `-m vllm.entrypoints…`) or one it spawned, which
# renames itself VLLM::EngineCore / VLLM::Worker….
_VLLM_PROC_RE = re.compile(r"VLLM::|(?:^|/)vllm\s+serve\b|vllm\.entrypoints|-m\s+vllm\b")
_VLLM_SERVER_RE = re.compile(r"(?:^|/)vllm\s+serve\b|vllm\.entrypoints")


@parser(
    "gpu_apps",
    ["app_count", "used_mib_total", "apps", "leftover", "zombie", "missing", "foreign", "vllm_count",
     "free_share_for_vllm", "tightest_gpu", "per_gpu", "error"],
)
def gpu_apps(out: Output) -> Facts:
    """Output of scripts/gpu_apps.sh: `gpu bus=… total_mib=… used_mib=…` per GPU, `app pid=… bus=…
    used_mib=… name=…`, then `proc pid=… state=… ppid=…` and `cmdline pid=… …` lines for every visible
    PID and its parent.

    `free_share_for_vllm` is the smallest share of a GPU's memory that a (re)started vLLM could take:
    memory used by anything but vLLM's own processes (foreign, zombie, invisible PIDs, other containers)
    is not coming back. vLLM refuses to start when it is below gpu_memory_utilization."""
    if out.rc:
        return {"error": _smi_error(out)}
    apps: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    procs: dict[int, dict[str, Any]] = {}
    cmdlines: dict[int, str] = {}
    for line in out.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        fields = dict(re.findall(r"(\w+)=(\S*)", rest.split(" name=")[0]))
        if kind == "gpu":
            gpus.append({"bus": fields.get("bus", "?"), "total": to_number(fields.get("total_mib", "")),
                         "used": to_number(fields.get("used_mib", ""))})
        elif kind == "app":
            name = rest.split(" name=", 1)[1] if " name=" in rest else ""
            apps.append({"pid": int(fields["pid"]), "used": to_number(fields.get("used_mib", "")) or 0,
                         "bus": fields.get("bus"), "name": name.strip(), "vllm": False})
        elif kind == "proc":
            procs[int(fields["pid"])] = {"state": fields.get("state"), "ppid": int(fields.get("ppid") or 0)}
        elif kind == "cmdline":
            pid_text, _, cmd = rest.partition(" ")
            cmdlines[int(pid_text.split("=", 1)[1])] = cmd.strip()
    leftover, zombie, missing, foreign, described = [], [], [], [], []
    vllm_count = 0
    for app in apps:
        pid = app["pid"]
        cmd = cmdlines.get(pid) or app["name"]
        label = f"pid {pid} ({cmd[:80]}) holds {app['used']:g} MiB"
        described.append(label)
        proc = procs.get(pid)
        if proc is None:
            missing.append(f"pid {pid} ({app['name']}) holds {app['used']:g} MiB")
            continue
        if proc["state"] == "Z":
            zombie.append(label)
            continue
        if not _VLLM_PROC_RE.search(cmd):
            foreign.append(label)
            continue
        vllm_count += 1
        app["vllm"] = True
        parent_cmd = cmdlines.get(proc["ppid"], "")
        if not _VLLM_SERVER_RE.search(cmd) and not _VLLM_PROC_RE.search(parent_cmd):
            leftover.append(f"{label}, its vLLM parent is gone (parent pid {proc['ppid']}: {parent_cmd[:60] or '?'})")
    free_share, tightest = _free_share_for_vllm(gpus, apps)
    return {
        "app_count": len(apps),
        "used_mib_total": sum(a["used"] for a in apps),
        "apps": described,
        "leftover": leftover,
        "zombie": zombie,
        "missing": missing,
        "foreign": foreign,
        "vllm_count": vllm_count,
        "free_share_for_vllm": free_share,
        "tightest_gpu": tightest,
        # each GPU's memory as gpu.inventory gives it, for the memory picture (bot/present/memory_view.py)
        "per_gpu": [{"index": i, "bus": g["bus"], "total_mib": g["total"], "used_mib": g["used"]}
                    for i, g in enumerate(gpus)],
        "error": None,
    }


def _free_share_for_vllm(gpus: list[dict[str, Any]], apps: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """(smallest free share over the GPUs once vLLM's own memory is released, that GPU described)."""
    best: tuple[float, str] | None = None
    for index, gpu in enumerate(gpus):
        total, used = gpu["total"], gpu["used"]
        if not total or used is None:
            continue
        own = sum(a["used"] for a in apps if a["vllm"] and a["bus"] == gpu["bus"])
        held = max(0.0, used - own)
        share = max(0.0, (total - held) / total)
        text = f"GPU{index} ({gpu['bus']}): {held / 1024:.1f} of {total / 1024:.1f} GiB held by other processes"
        if best is None or share < best[0]:
            best = (round(share, 4), text)
    return (best[0], best[1]) if best else (None, None)
