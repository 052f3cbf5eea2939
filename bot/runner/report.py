"""What a diagnosis run produced: per host, per check verdicts, plus the raw outputs for upload.

`DiagnosisReport.to_json()` is the stable contract of `vllm-doctor diagnose --json` and of the Slack
layer: {"hosts": [{"host", "error", "error_kind", "checks": [{"id", "verdict", "message", "cases", "duration_s"}]}]}.
`load_report(path)` reads it back (`vllm-doctor explain LOG --host-report report.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import UserInputError

VERDICT_ORDER = ("ok", "skipped", "warn", "timeout", "error", "fail")  # worst last
VERDICT_ICON = {"ok": "✅", "warn": "⚠️", "fail": "❌", "error": "❗", "timeout": "⏱", "skipped": "➖"}


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=VERDICT_ORDER.index) if verdicts else "skipped"


@dataclass
class CheckResult:
    id: str
    title: str
    verdict: str
    message: str
    cases: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    tier: int = 0
    why: str | None = None
    command: str | None = None  # shown in the raw file, never executed from here
    rc: int | None = None
    stdout: str = ""  # redacted
    stderr: str = ""  # redacted
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": self.verdict, "message": self.message, "cases": list(self.cases),
                "duration_s": round(self.duration_s, 3)}


@dataclass
class HostReport:
    host: str
    address: str | None = None
    error: str | None = None  # the host could not be checked at all (unreachable, auth, host key)
    # for scripts (`--json`): HostUnreachable / AuthFailed / HostKeyMismatch / RunnerError (the host cannot
    # run the checks) / InternalError (a bug, reported per host); None when the host was checked
    error_kind: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        return worst([c.verdict for c in self.checks])

    def by_area(self) -> dict[str, str]:
        """area -> worst verdict (for the host × area grid)."""
        areas: dict[str, list[str]] = {}
        for check in self.checks:
            areas.setdefault(check.area, []).append(check.verdict)
        return {area: worst(v) for area, v in areas.items()}

    def check(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "error": self.error, "error_kind": self.error_kind,
                "duration_s": round(self.duration_s, 3), "checks": [c.to_dict() for c in self.checks]}


@dataclass
class DiagnosisReport:
    target: str
    hosts: list[HostReport]
    max_tier: int = 0
    checks_requested: list[str] | None = None
    started_at: float = 0.0  # unix time
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "max_tier": self.max_tier, "duration_s": round(self.duration_s, 3),
                "hosts": [h.to_dict() for h in self.hosts]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @property
    def verdict(self) -> str:
        return worst([h.verdict for h in self.hosts])

    def host(self, name: str) -> HostReport | None:
        return next((h for h in self.hosts if h.host == name), None)

    def findings(self) -> list[tuple[str, CheckResult]]:
        """(host, result) for every check that is not ok/skipped, worst first."""
        out = [(h.host, c) for h in self.hosts for c in h.checks if c.verdict not in ("ok", "skipped")]
        return sorted(out, key=lambda hc: -VERDICT_ORDER.index(hc[1].verdict))

    def case_ids(self) -> list[str]:
        """KB cases the findings point to, worst finding first, without duplicates."""
        seen: list[str] = []
        for _, result in self.findings():
            seen += [c for c in result.cases if c not in seen]
        return seen

    def facts_for_prompt(self, host: str | None = None, max_chars: int = 3000) -> str:
        """Short, redacted host facts for the explain step: one line per check, failures first (across
        all hosts of a group, so one healthy host's lines cannot crowd out another's failures)."""
        ranked: list[tuple[int, str]] = []
        for report in self.hosts:
            if host and report.host != host:
                continue
            if report.error:
                ranked.append((VERDICT_ORDER.index("error"), f"{report.host}: could not be checked: {report.error}"))
                continue
            for c in report.checks:
                if c.verdict == "skipped":
                    continue
                ranked.append((VERDICT_ORDER.index(c.verdict), f"{report.host} {c.id} [{c.verdict}]: {c.message}"))
        ranked.sort(key=lambda item: -item[0])  # stable: host order, then catalogue order within a verdict
        text = "\n".join(line for _, line in ranked)
        return text if len(text) <= max_chars else text[: max_chars - 15] + "\n[… truncated]"

    def raw_text(self) -> str:
        """Every command, exit status and (redacted) output, for upload as a file in the thread."""
        parts = [f"# vllm-doctor diagnose {self.target}  (tier ≤ {self.max_tier}, {self.duration_s:.1f} s)"]
        for report in self.hosts:
            parts.append(f"\n======== {report.host} ({report.address or report.host}) ========")
            if report.error:
                parts.append(f"HOST ERROR: {report.error}")
                continue
            shown: dict[tuple[str | None, str, str], str] = {}  # checks sharing one command share its output
            for c in report.checks:
                parts.append(f"\n--- {c.id} [{c.verdict}] {c.message}")
                if c.command:
                    parts.append(f"$ {c.command}   (rc {c.rc}, {c.duration_s:.2f} s)")
                key = (c.command, c.stdout, c.stderr)
                if c.command and key in shown:
                    parts.append(f"(same output as {shown[key]} above)")
                    continue
                shown[key] = c.id
                if c.stdout.strip():
                    parts.append(c.stdout.rstrip())
                if c.stderr.strip():
                    parts.append("[stderr]\n" + c.stderr.rstrip())
        return "\n".join(parts) + "\n"


# --- reading a report back ----------------------------------------------------------------------------------


def report_from_dict(data: Any, source: str = "the report") -> DiagnosisReport:
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
            checks.append(CheckResult(id=check["id"], title=check["id"], verdict=check["verdict"],
                                      message=str(check.get("message") or ""), cases=[str(c) for c in cases],
                                      duration_s=_seconds(check.get("duration_s"))))
        error, kind = item.get("error"), item.get("error_kind")
        hosts.append(HostReport(host=item["host"], error=str(error) if error else None,
                                error_kind=str(kind) if error and kind else None, checks=checks,
                                duration_s=_seconds(item.get("duration_s"))))
    target = data.get("target") or (hosts[0].host if len(hosts) == 1 else "hosts")
    tier = data.get("max_tier")
    return DiagnosisReport(target=str(target), hosts=hosts, max_tier=tier if tier in (0, 1, 2) else 0,
                           duration_s=_seconds(data.get("duration_s")))


def _seconds(value: Any) -> float:
    """A duration from the JSON; informational only, so anything odd reads as 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def load_report(path: Path | str) -> DiagnosisReport:
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
