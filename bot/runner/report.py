"""What a diagnosis run produced: per host, per check verdicts, plus the raw outputs for upload.

`FleetReport.to_json()` (bot/models.py) is the stable contract of `vllm-doctor diagnose --json` and of the Slack
layer: {"hosts": [{"host", "error", "error_kind", "checks": [{"id", "verdict", "message", "cases", "duration_s"}]}]}.
`load_report(path)` reads it back (`vllm-doctor explain LOG --host-report report.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.errors import UserInputError
from bot.models import CHECK_VERDICTS, CheckResult, FleetReport, HostReport, worst

# The values live in bot/models.py (they cross the stage boundary); the old names stay for runner code.
VERDICT_ORDER = CHECK_VERDICTS
DiagnosisReport = FleetReport
VERDICT_ICON = {"ok": "✅", "warn": "⚠️", "fail": "❌", "error": "❗", "timeout": "⏱", "skipped": "➖"}

__all__ = ["VERDICT_ICON", "VERDICT_ORDER", "CheckResult", "DiagnosisReport", "FleetReport", "HostReport",
           "load_report", "report_from_dict", "worst"]


# --- reading a report back ----------------------------------------------------------------------------------


def report_from_dict(data: Any, source: str = "the report") -> FleetReport:
    """The JSON of `vllm-doctor diagnose --json` back into a report (verdicts and messages; raw outputs are
    not part of the JSON). UserInputError naming the first problem for anything else."""

    def bad(problem: str) -> UserInputError:
        return UserInputError(f"{source} is not a `vllm-doctor diagnose --json` report: {problem}")

    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        raise bad('no "hosts" list at the top level')
    hosts = []
    for i, item in enumerate(data["hosts"]):
        if not isinstance(item, dict) or not isinstance(item.get("host"), str) or not item["host"]:
            raise bad(f'hosts[{i}] has no "host" name')
        checks = []
        for j, check in enumerate(item.get("checks") or []):
            where = f"hosts[{i}].checks[{j}]"
            if not isinstance(check, dict) or not isinstance(check.get("id"), str):
                raise bad(f'{where} has no "id"')
            if check.get("verdict") not in VERDICT_ORDER:
                raise bad(f"{where} has verdict {check.get('verdict')!r}; expected one of {', '.join(VERDICT_ORDER)}")
            cases = check.get("cases") or []
            if not isinstance(cases, list):
                raise bad(f'{where}: "cases" must be a list of KB case ids')
            raw_facts = check.get("facts")
            facts: dict[str, Any] = raw_facts if isinstance(raw_facts, dict) else {}
            result = CheckResult(id=check["id"], title=check["id"], verdict=check["verdict"],
                                 message=str(check.get("message") or ""), cases=[str(c) for c in cases],
                                 duration_s=_seconds(check.get("duration_s")), facts=dict(facts))
            result.facts = result.version_facts()  # only the version facts a report may carry
            checks.append(result)
        error, kind = item.get("error"), item.get("error_kind")
        hosts.append(HostReport(host=item["host"], error=str(error) if error else None,
                                error_kind=str(kind) if error and kind else None, checks=checks,
                                duration_s=_seconds(item.get("duration_s"))))
    target = data.get("target") or (hosts[0].host if len(hosts) == 1 else "hosts")
    tier = data.get("max_tier")
    return FleetReport(target=str(target), hosts=hosts, max_tier=tier if tier in (0, 1, 2) else 0,
                           duration_s=_seconds(data.get("duration_s")))


def _seconds(value: Any) -> float:
    """A duration from the JSON; informational only, so anything odd reads as 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def load_report(path: Path | str) -> FleetReport:
    """Read a `vllm-doctor diagnose --json` file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot read the host report {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UserInputError(f"the host report {path} is not UTF-8 text") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserInputError(f"the host report {path} is not JSON ({exc}); pass the output of "
                             "`vllm-doctor diagnose HOST --json`") from exc
    return report_from_dict(data, source=str(path))
