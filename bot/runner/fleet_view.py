"""What a group diagnosis adds to the per-host verdicts: hosts that differ from the majority, drift from
the group's saved baseline, and the hosts × areas grid picture. Shared by the CLI and Slack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.runner.fleet_diff import Difference, Disagreement, Drift
from bot.runner.report import DiagnosisReport

if TYPE_CHECKING:  # bot.present.pictures imports matplotlib: only when a picture is drawn (issue 29)
    from bot.present.pictures import GridCell, Picture


@dataclass(frozen=True)
class FleetView:
    differences: list[Difference]
    drift: list[Drift]
    baseline_saved: bool
    baseline_at: float | None  # when the baseline compared against was saved
    disagreements: tuple[Disagreement, ...] = ()  # hosts differ, but no majority names an odd one


def fleet_view(report: DiagnosisReport, settings: Any, *, save_baseline: bool = False,
               saved_by: str | None = None) -> FleetView:
    """What a group run adds: hosts that differ from the majority, drift from the saved baseline."""
    from bot.runner.baseline import BaselineStore
    from bot.runner.fleet_diff import baseline_drift, baseline_of, fleet_diff, fleet_disagreements, fleet_facts

    facts = fleet_facts(report)
    differences = fleet_diff(facts)
    disagreements = tuple(fleet_disagreements(facts))
    store = BaselineStore(settings.store_target(settings.runner_audit_db))
    before = store.latest(report.target)
    drift = baseline_drift(report, before.facts) if before is not None else []
    if save_baseline:
        store.save(report.target, baseline_of(report), saved_by=saved_by)
    return FleetView(differences, drift, save_baseline, before.saved_at if before else None, disagreements)


Cells = dict[tuple[str, str], "GridCell"]


def grid_cells(report: DiagnosisReport, view: FleetView | None = None) -> tuple[list[str], Cells]:
    """(areas, (host, area) -> cell): the worst verdict and finding per cell. A host the fleet diff names as
    odd, or one of hosts that disagree, is not green where it differs: an ok cell becomes `warn` with the
    difference as its note."""
    from bot.present.pictures import GridCell
    from bot.runner.fleet_diff import field_area

    areas = sorted({c.area for h in report.hosts for c in h.checks}) or ["host"]
    cells: Cells = {}
    for h in report.hosts:
        if h.error:
            for area in areas:
                cells[(h.host, area)] = GridCell("error", "not checked" if area != areas[0] else h.error)
            continue
        for area, verdict in h.by_area().items():
            worst_check = next((c for c in h.checks if c.area == area and c.verdict == verdict), None)
            cells[(h.host, area)] = GridCell(verdict, worst_check.message if worst_check else "")
    marks = [(d.host, d.field, f"differs: {d.field} {d.value} vs {d.majority} on {d.majority_hosts} hosts")
             for d in (view.differences if view else ())]
    marks += [(host, g.field, f"hosts differ: {g.field} {value}")
              for g in (view.disagreements if view else ()) for host, value in g.values]
    for host, label, note in marks:
        key = (host, field_area(label))
        cell = cells.get(key)
        if cell is not None and cell.verdict in ("ok", "skipped"):
            cells[key] = GridCell("warn", note)
    return areas, cells


def grid_picture(report: DiagnosisReport, view: FleetView | None = None) -> Picture:
    """Hosts × check areas, coloured by the worst verdict (see grid_cells)."""
    from bot.present.pictures import fleet_grid_picture

    hosts = [h.host for h in report.hosts]
    areas, cells = grid_cells(report, view)
    bad = sum(1 for h in report.hosts if h.verdict in ("fail", "error", "timeout"))
    return fleet_grid_picture(hosts, areas, cells, f"{report.target}: {len(hosts)} hosts, {bad} with problems")


def sentences(view: FleetView) -> list[str]:
    """Drift first (what changed since the group last worked), then hosts that differ from the rest."""
    return ([d.sentence() for d in view.drift] + [d.sentence() for d in view.differences]
            + [g.sentence() for g in view.disagreements])
