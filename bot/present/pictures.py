"""PNG pictures for answers: GPU memory bars (from a log's facts or a host diagnosis) and the fleet grid.

The only matplotlib import in the project (Agg backend: no display, thread-safe per figure). Inputs are
plain values built by `bot/present/memory_view.py` and `bot/runner/fleet_diff.py`; this module only draws. Every
picture is sized for a phone screen (about 1,000–1,400 px wide, 13 pt and larger text) and returns the
labels it drew, so tests can check what a person would read without OCR.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on servers
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

DPI = 100
FONT = 14  # points; at 100 dpi a 1,200 px picture is still readable when a phone scales it to ~400 pt
# pyplot keeps global state; one figure at a time is cheap (a picture takes ~100 ms) and keeps it safe.
_LOCK = threading.Lock()

SEGMENT_COLOURS = {
    "weights": "#4c72b0",
    "activation peak": "#dd8452",
    "non-torch": "#8172b3",
    "KV cache": "#55a868",
    "other processes": "#c44e52",
    "vLLM": "#4c72b0",
    "used by others": "#c44e52",
    "vLLM share": "#55a868",
}
VERDICT_COLOURS = {
    "ok": "#55a868",
    "skipped": "#d0d0d0",
    "warn": "#f2c14e",
    "timeout": "#e07b39",
    "error": "#c44e52",
    "fail": "#c44e52",
}
VERDICT_MARK = {"warn": "WARN", "timeout": "TIMEOUT", "error": "ERROR", "fail": "FAIL"}


@dataclass(frozen=True)
class Segment:
    name: str
    gib: float  # may be negative: the part that does not fit (drawn hatched below zero)
    failing: bool = False


@dataclass(frozen=True)
class MemoryBar:
    """One GPU: what fills it, against its total and the share vLLM may use."""

    label: str  # "GPU0 A100-SXM4-80GB" or "per GPU (TP=2)"
    total_gib: float
    budget_gib: float | None  # total × gpu_memory_utilization, when known
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Picture:
    png: bytes
    width_px: int
    height_px: int
    labels: tuple[str, ...]  # every text drawn (title, axis, bar labels, legend)
    title: str


def _render(fig: plt.Figure, title: str) -> Picture:
    labels = tuple(t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip())
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    width, height = (int(round(v)) for v in fig.get_size_inches() * DPI)
    plt.close(fig)
    return Picture(buf.getvalue(), width, height, labels, title)


def memory_picture(bars: Sequence[MemoryBar], title: str) -> Picture:
    """Stacked horizontal bars, one per GPU, with the utilisation budget as a dashed line."""
    if not bars:
        raise ValueError("no GPU to draw")
    height_in = 2.6 + 1.2 * len(bars)
    with _LOCK:
        fig, ax = plt.subplots(figsize=(12, height_in))
        names_seen: dict[str, str] = {}
        for row, bar in enumerate(reversed(bars)):
            left = 0.0
            for seg in bar.segments:
                colour = SEGMENT_COLOURS.get(seg.name, "#937860")
                names_seen.setdefault(seg.name, colour)
                if seg.gib < 0:
                    # The shortfall overlaps the end of the stack: what is there beyond the budget.
                    ax.barh(row, seg.gib, left=left, color="none", edgecolor="#c44e52", hatch="//", linewidth=2.5)
                    ax.text(left + seg.gib / 2, row + 0.47, f"{seg.name}: {seg.gib:.1f} GiB", ha="center",
                            va="bottom", fontsize=FONT, color="#c44e52", fontweight="bold")
                    continue
                ax.barh(row, seg.gib, left=left, color=colour, edgecolor="#c44e52" if seg.failing else "white",
                        linewidth=3 if seg.failing else 1, hatch="//" if seg.failing else None)
                if seg.gib >= 0.06 * max(bar.total_gib, 1e-9):  # label only what has room
                    ax.text(left + seg.gib / 2, row, f"{seg.gib:.1f}", ha="center", va="center",
                            fontsize=FONT, color="white", fontweight="bold" if seg.failing else "normal")
                if seg.failing and left + seg.gib > bar.total_gib:
                    over = left + seg.gib - bar.total_gib
                    ax.text(bar.total_gib, row + 0.47, f"{seg.name}: {over:.1f} GiB short", ha="center",
                            va="bottom", fontsize=FONT, color="#c44e52", fontweight="bold")
                left += seg.gib
            # One caption per distinct total/budget (the bottom bar's), not one per bar: less clutter.
            captions = row == 0 or bar.total_gib != bars[-1].total_gib
            ax.plot([bar.total_gib, bar.total_gib], [row - 0.42, row + 0.42], color="black", linewidth=2)
            if captions:
                ax.text(bar.total_gib, row - 0.47, f"total {bar.total_gib:.1f} GiB", ha="center", va="top",
                        fontsize=FONT - 2)
            if bar.budget_gib is not None:
                ax.plot([bar.budget_gib] * 2, [row - 0.45, row + 0.45], color="#333333", linestyle="--",
                        linewidth=2)
                if captions:
                    ax.text(bar.budget_gib, row - 0.47, f"budget {bar.budget_gib:.1f} GiB", ha="right",
                            va="top", fontsize=FONT - 2)
        ax.set_yticks(range(len(bars)), [b.label for b in reversed(bars)], fontsize=FONT)
        ax.set_xlabel("GiB", fontsize=FONT)
        right = max(max(b.total_gib for b in bars), max(sum(max(s.gib, 0) for s in b.segments) for b in bars))
        ax.set_xlim(0, right * 1.04)
        ax.set_ylim(-0.9, len(bars) + 0.45)  # room on top for the legend
        ax.tick_params(axis="x", labelsize=FONT - 1)
        ax.set_title(title, fontsize=FONT + 2, loc="left")
        ax.legend(handles=[Patch(color=c, label=n) for n, c in names_seen.items()], fontsize=FONT - 1,
                  loc="upper left", ncol=min(5, len(names_seen)), frameon=False)
        fig.tight_layout()
        fig.tight_layout()
        return _render(fig, title)


@dataclass(frozen=True)
class GridCell:
    verdict: str  # ok / warn / fail / error / timeout / skipped
    note: str = ""  # the worst finding of the cell, shortened


def fleet_grid_picture(hosts: Sequence[str], areas: Sequence[str], cells: dict[tuple[str, str], GridCell],
                       title: str) -> Picture:
    """Hosts × check areas, coloured by the worst verdict; a cell with a problem names it (mark + finding)."""
    if not hosts or not areas:
        raise ValueError("an empty grid has nothing to draw")
    width_in = min(16.0, max(8.0, 3.2 + 1.45 * len(areas)))
    height_in = min(40.0, 1.8 + 0.5 * len(hosts))
    order = list(VERDICT_COLOURS)
    codes = [[order.index(cells[(h, a)].verdict) if (h, a) in cells and cells[(h, a)].verdict in order
              else order.index("skipped") for a in areas] for h in hosts]
    with _LOCK:
        fig, ax = plt.subplots(figsize=(width_in, height_in))
        # One mesh for all colours (fast even for 200 hosts); text only where something is wrong: a green
        # cell says "OK" by its colour, and a grid of 1,000 "OK" labels is slow to draw and hard to read.
        ax.pcolormesh(codes, cmap=ListedColormap([VERDICT_COLOURS[v] for v in order]), vmin=-0.5,
                      vmax=len(order) - 0.5, edgecolors="white", linewidth=3)
        for r, host in enumerate(hosts):
            for c, area in enumerate(areas):
                cell = cells.get((host, area))
                verdict = cell.verdict if cell else "skipped"
                if verdict in ("ok", "skipped"):
                    continue
                ink = "black" if verdict == "warn" else "white"
                note = cell.note if cell else ""
                ax.text(c + 0.5, r + (0.32 if note else 0.5), VERDICT_MARK.get(verdict, verdict), ha="center",
                        va="center", fontsize=FONT - 1, color=ink, fontweight="bold")
                if note:  # the worst finding of the cell, cut to fit
                    ax.text(c + 0.5, r + 0.7, note if len(note) <= 20 else note[:19] + "…", ha="center",
                            va="center", fontsize=FONT - 4, color=ink)
        ax.set_xlim(0, len(areas))
        ax.set_ylim(len(hosts), 0)
        ax.set_xticks([c + 0.5 for c in range(len(areas))], list(areas), fontsize=FONT, rotation=30, ha="right")
        ax.set_yticks([r + 0.5 for r in range(len(hosts))], list(hosts), fontsize=FONT)
        ax.tick_params(length=0)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        ax.set_title(title, fontsize=FONT + 2, loc="left")
        fig.tight_layout()
        return _render(fig, title)
