"""What a group diagnosis adds to the per-host verdicts: hosts that differ from the majority, drift from
the group's saved baseline, and the hosts × areas grid picture. Shared by the CLI and Slack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.pictures import GridCell, Picture, fleet_grid_picture
from bot.runner.fleet_diff import Difference, Drift
from bot.runner.report import DiagnosisReport


@dataclass(frozen=True)
class FleetView:
    differences: list[Difference]
    drift: list[Drift]
    baseline_saved: bool
    baseline_at: float | None  # when the baseline compared against was saved


def fleet_view(report: DiagnosisReport, settings: Any, *, save_baseline: bool = False,
               saved_by: str | None = None) -> FleetView:
    """What a group run adds: hosts that differ from the majority, drift from the saved baseline."""
    from bot.runner.baseline import BaselineStore
    from bot.runner.fleet_diff import baseline_drift, baseline_of, fleet_diff, fleet_facts

    differences = fleet_diff(fleet_facts(report))
    store = BaselineStore(settings.store_target(settings.runner_audit_db))
    before = store.latest(report.target)
    drift = baseline_drift(report, before.facts) if before is not None else []
    if save_baseline:
        store.save(report.target, baseline_of(report), saved_by=saved_by)
    return FleetView(differences, drift, save_baseline, before.saved_at if before else None)


def grid_picture(report: DiagnosisReport) -> Picture:
    """Hosts × check areas, the worst verdict and finding per cell."""
    hosts = [h.host for h in report.hosts]
    areas = sorted({c.area for h in report.hosts for c in h.checks}) or ["host"]
    cells: dict[tuple[str, str], GridCell] = {}
    for h in report.hosts:
        if h.error:
            for area in areas:
                cells[(h.host, area)] = GridCell("error", "not checked" if area != areas[0] else h.error)
            continue
        for area, verdict in h.by_area().items():
            worst_check = next((c for c in h.checks if c.area == area and c.verdict == verdict), None)
            cells[(h.host, area)] = GridCell(verdict, worst_check.message if worst_check else "")
    bad = sum(1 for h in report.hosts if h.verdict in ("fail", "error", "timeout"))
    return fleet_grid_picture(hosts, areas, cells, f"{report.target}: {len(hosts)} hosts, {bad} with problems")


def sentences(view: FleetView) -> list[str]:
    """Drift first (what changed since the group last worked), then hosts that differ from the rest."""
    return [d.sentence() for d in view.drift] + [d.sentence() for d in view.differences]
