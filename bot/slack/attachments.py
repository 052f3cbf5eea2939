"""Files that follow an answer in its thread, after the text is posted (never delaying it):
the GPU memory picture when the log states the numbers, and a vLLM bug-report draft when the KB could
not explain the log (also on the "Draft a vLLM issue" button). Built from already-redacted values."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.models import Diagnosis, LogFacts

log = logging.getLogger(__name__)


def memory_png(diagnosis: Diagnosis) -> tuple[bytes, str] | None:
    """(PNG, title) of the GPU memory picture, or None when the log has no memory numbers."""
    if diagnosis.facts is None:
        return None
    from bot.present.memory_view import log_memory_bars, log_memory_title
    from bot.present.pictures import memory_picture

    bars = log_memory_bars(diagnosis.facts)
    if not bars:
        return None
    title = log_memory_title(diagnosis.facts)
    return memory_picture(bars, title).png, title


def wants_draft(diagnosis: Diagnosis) -> bool:
    """A log (not a question) that the KB could not explain with confidence."""
    return diagnosis.kind == "log" and diagnosis.verdict in ("unknown", "uncertain") and bool(
        diagnosis.distilled.root_errors)


def draft_text(diagnosis: Diagnosis, feedback: Mapping[str, str] | None = None,
               host_facts: Mapping[str, Mapping[str, object]] | None = None, host: str | None = None) -> str:
    from bot.present.report_draft import draft, environment_from_host

    env = environment_from_host(host_facts, host or "?") if host_facts else None
    return draft(diagnosis, diagnosis.facts or LogFacts(), env=env, feedback=feedback)


def feedback_of(kb_growth: Any, diagnosis: Diagnosis) -> dict[str, str]:
    """case id → what the team's votes say about it ("Fixed it" / "Didn't help"), for the draft."""
    out: dict[str, str] = {}
    if kb_growth is None:
        return out
    for match in diagnosis.matches[:3]:
        try:
            text = kb_growth.outcome_text(match.case_id)
        except Exception:  # noqa: BLE001 - the draft goes out without the votes
            log.warning("could not read feedback for %s", match.case_id)
            continue
        if text:
            out[match.case_id] = text
    return out


def fleet_extras(report: Any, settings: Any) -> tuple[list[str], list[tuple[str, bytes, str]]]:
    """For a group run: drift/difference sentences for the summary, and its pictures (grid, GPU memory)."""
    if len(report.hosts) < 2:
        return [], []
    from bot.present.memory_view import host_memory_bars
    from bot.present.pictures import memory_picture
    from bot.runner.fleet_view import fleet_view, grid_picture, sentences

    notes: list[str] = []
    view = None
    try:
        view = fleet_view(report, settings)
        notes = sentences(view)
    except Exception:  # noqa: BLE001 - the summary goes out without the fleet view
        log.exception("fleet view of %s failed", report.target)
    files: list[tuple[str, bytes, str]] = []
    try:
        files.append((f"fleet-{report.target}.png", grid_picture(report, view).png, f"Fleet view: {report.target}"))
        bars = host_memory_bars(report)
        if bars:
            files.append((f"gpu-memory-{report.target}.png",
                          memory_picture(bars, f"GPU memory on {report.target}").png, f"GPU memory: {report.target}"))
    except Exception:  # noqa: BLE001 - pictures are best effort
        log.exception("pictures of %s failed", report.target)
    return notes, files
