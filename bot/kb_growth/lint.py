"""The KB rules a schema cannot check, applied to a new or changed case before anyone writes it.

Same rules as the KB self-test (tests/test_kb_cases.py), with the same matching code (distill +
SignatureScanner), so a case accepted here passes there:
  errors   - every example hits at least one signature of its own case;
           - no signature fires on a healthy start-up log;
  warnings - a signature that also matches another case's example (too broad, or a duplicate of it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.diagnosis.distill import distill
from bot.diagnosis.match import SignatureScanner
from bot.models import LogLine
from kb.loader import DEFAULT_CASES_DIR
from kb.schema import Case

log = logging.getLogger(__name__)

DEFAULT_HEALTHY_DIR = DEFAULT_CASES_DIR.parent.parent / "tests" / "eval" / "healthy"


@dataclass(frozen=True)
class Problem:
    field: str  # "signatures", "examples", … (a form field / schema field)
    message: str


@dataclass
class LintReport:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)  # other case ids whose examples a signature matches

    @property
    def ok(self) -> bool:
        return not self.errors

    def by_field(self) -> dict[str, str]:
        """First error per field (what a form shows inline)."""
        out: dict[str, str] = {}
        for p in self.errors:
            out.setdefault(p.field, p.message)
        return out


@functools.lru_cache(maxsize=8)
def _healthy_lines(directory: str) -> tuple[tuple[str, tuple[LogLine, ...]], ...]:
    path = Path(directory)
    logs = sorted(path.glob("*.log")) if path.is_dir() else []
    if not logs:
        log.warning("no healthy start-up logs in %s: new signatures are not checked against them", path)
    return tuple((p.name, distill(p.read_text(encoding="utf-8", errors="replace")).cleaned) for p in logs)


def healthy_logs(directory: Path | None) -> tuple[tuple[str, tuple[LogLine, ...]], ...]:
    """(name, cleaned lines) of each healthy start-up log, distilled once per process."""
    return _healthy_lines(str(directory or DEFAULT_HEALTHY_DIR))


@functools.lru_cache(maxsize=4096)
def cleaned_lines(text: str) -> tuple[LogLine, ...]:
    """The lines the matcher scans for signatures, per log text (cached: KB examples are checked often)."""
    return distill(text).cleaned


def signature_fires(pattern_case: Case, lines: Sequence[LogLine]) -> list[tuple[str, LogLine]]:
    """(pattern, line) for each signature of `pattern_case` that fires on `lines` (first line per pattern)."""
    hits = SignatureScanner([pattern_case]).scan(lines).get(pattern_case.id, [])
    seen: dict[str, LogLine] = {}
    for hit in hits:
        seen.setdefault(hit.pattern, hit.line)
    return list(seen.items())


def lint_case(
    case: Case,
    *,
    healthy: Sequence[tuple[str, Sequence[LogLine]]],
    others: Iterable[Case] = (),
) -> LintReport:
    report = LintReport()
    scanner = SignatureScanner([case])
    for n, example in enumerate(case.examples, 1):
        if case.id not in scanner.scan(cleaned_lines(example.log)):
            report.errors.append(
                Problem("examples", f"example {n} ({example.source}) matches none of the signatures")
            )
    for name, lines in healthy:
        for pattern, line in signature_fires(case, lines):
            report.errors.append(
                Problem(
                    "signatures",
                    f"{pattern!r} fires on the healthy start-up log {name} (line {line.line_no}: "
                    f"{line.text[:80]!r}); make it more specific",
                )
            )
    for other in others:
        if other.id == case.id:
            continue
        for example in other.examples:
            fired = signature_fires(case, cleaned_lines(example.log))
            if fired:
                report.overlaps.append(other.id)
                report.warnings.append(
                    Problem(
                        "signatures",
                        f"{fired[0][0]!r} also matches an example of case {other.id} ({other.title}): "
                        "too broad, or the same failure as that case",
                    )
                )
                break
    return report
