"""Plain system facts: df, /proc/meminfo, `key=value` script output, disk free per path."""

from __future__ import annotations

from bot.runner.parsers.base import Facts, Output, ParseError, parser, to_number


@parser("df", ["filesystem", "size_bytes", "avail_bytes", "used_fraction", "mount"])
def df(out: Output) -> Facts:
    """`df -P -k PATH`: header plus one line (a long filesystem name may wrap onto the next line)."""
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith("Filesystem"):
        raise ParseError(f"unexpected df output (rc {out.rc}): {(lines or ['nothing'])[0][:200]}")
    cells = " ".join(lines[1:]).split()
    if len(cells) < 6:
        raise ParseError(f"unexpected df line: {' '.join(cells)[:200]}")
    size_kb, avail_kb = to_number(cells[1]), to_number(cells[3])
    if size_kb is None or avail_kb is None:
        raise ParseError(f"df sizes are not numbers: {' '.join(cells)[:200]}")
    return {
        "filesystem": cells[0],
        "size_bytes": int(size_kb) * 1024,
        "avail_bytes": int(avail_kb) * 1024,
        "used_fraction": round(1 - avail_kb / size_kb, 4) if size_kb else None,
        "mount": " ".join(cells[5:]),
    }


@parser(
    "meminfo",
    ["mem_total_bytes", "mem_available_bytes", "swap_total_bytes", "swap_free_bytes", "swap_used_fraction"],
)
def meminfo(out: Output) -> Facts:
    values: dict[str, int] = {}
    for line in out.stdout.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemTotal" not in values:
        raise ParseError("no MemTotal in /proc/meminfo")
    swap_total, swap_free = values.get("SwapTotal", 0), values.get("SwapFree", 0)
    return {
        "mem_total_bytes": values["MemTotal"],
        "mem_available_bytes": values.get("MemAvailable", values.get("MemFree")),
        "swap_total_bytes": swap_total,
        "swap_free_bytes": swap_free,
        "swap_used_fraction": round(1 - swap_free / swap_total, 4) if swap_total else 0.0,
    }


@parser("key_value", [], maps=("kv",))
def key_value(out: Output) -> Facts:
    """`name=value` lines from a bundled script; numbers become numbers."""
    kv: dict[str, object] = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().replace("_", "").isalnum():
            number = to_number(value)
            kv[key.strip()] = number if number is not None else value.strip()
    if not kv and out.rc:
        raise ParseError(f"script failed (rc {out.rc}): {(out.stderr.strip().splitlines() or [''])[-1][:200]}")
    return {"kv": kv}


@parser("disk_free", ["paths", "low", "very_low", "min_free_bytes", "inodes_full"])
def disk_free(out: Output) -> Facts:
    """scripts/disk_free.sh: `label<TAB>path<TAB>avail_kb size_kb mount<TAB>inode_use%` per path."""
    paths, low, very_low, inodes_full = [], [], [], []
    min_free = None
    for line in out.stdout.splitlines():
        cells = line.split("\t")
        if len(cells) != 4:
            continue
        label, path, space, inode_use = cells
        parts = space.split()
        if len(parts) < 3 or to_number(parts[0]) is None:
            continue
        free = int(to_number(parts[0]) or 0) * 1024
        gib = free / 2**30
        desc = f"{label} {path} ({gib:.1f} GiB free on {parts[2]})"
        paths.append(desc)
        min_free = free if min_free is None else min(min_free, free)
        if gib < 1:
            very_low.append(desc)
        elif gib < 20:
            low.append(desc)
        used = to_number(inode_use.rstrip("%"))
        if used is not None and used >= 95:
            inodes_full.append(f"{label} {path} ({inode_use} inodes used)")
    if not paths:
        raise ParseError("no df results for any path")
    return {"paths": paths, "low": low, "very_low": very_low, "min_free_bytes": min_free,
            "inodes_full": inodes_full}
