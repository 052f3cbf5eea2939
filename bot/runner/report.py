"""What a diagnosis run produced: per host, per check verdicts, plus the raw outputs for upload.

`DiagnosisReport.to_json()` is the stable contract of `vllm-doctor diagnose --json` and of the Slack
layer: {"hosts": [{"host", "error", "checks": [{"id", "verdict", "message", "cases", "duration_s"}]}]}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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
    error_kind: str | None = None  # HostUnreachable / AuthFailed / HostKeyMismatch / RunnerError
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
        return {"host": self.host, "error": self.error, "duration_s": round(self.duration_s, 3),
                "checks": [c.to_dict() for c in self.checks]}


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
        """Short, redacted host facts for the explain step: one line per check, failures first."""
        lines = []
        for report in self.hosts:
            if host and report.host != host:
                continue
            if report.error:
                lines.append(f"{report.host}: could not be checked: {report.error}")
                continue
            ordered = sorted(report.checks, key=lambda c: -VERDICT_ORDER.index(c.verdict))
            for c in ordered:
                if c.verdict == "skipped":
                    continue
                lines.append(f"{report.host} {c.id} [{c.verdict}]: {c.message}")
        text = "\n".join(lines)
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
