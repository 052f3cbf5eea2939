"""Turn facts into a verdict: the first rule of a check whose conditions all hold wins.

Pure functions over plain values. A condition on a missing fact (None) is false for every operator except
`exists: false` and `empty: true`, so a rule never fires on data the host did not give us.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kb.checks_schema import PLACEHOLDER_RE, Check, FactRef, Rule

BUILTIN_FACTS = ("rc", "stdout", "stderr")


@dataclass(frozen=True)
class FactView:
    """Facts visible to one check: its own, those of the checks it needs, and the host's fields."""

    own: dict[str, Any]
    needed: dict[str, dict[str, Any]]
    host: dict[str, Any]

    def get(self, path: str) -> Any:
        scope, sep, rest = path.rpartition(":")
        if not sep:
            facts = self.own
        elif scope == "host":
            facts = self.host
        else:
            facts = self.needed.get(scope, {})
        name, dot, key = rest.partition(".")
        value = facts.get(name)
        if dot:
            value = value.get(key) if isinstance(value, dict) else None
        return value


@dataclass(frozen=True)
class Outcome:
    verdict: str
    message: str
    cases: tuple[str, ...]
    rule_index: int


def _version(value: Any) -> Version | None:
    try:
        return Version(str(value))
    except InvalidVersion:
        return None


def _compare_numbers(op: str, left: Any, right: Any) -> bool:
    if isinstance(left, bool) or not isinstance(left, int | float):
        return False
    if isinstance(right, bool) or not isinstance(right, int | float):
        return False
    return {"lt": left < right, "le": left <= right, "gt": left > right, "ge": left >= right}[op]


def holds(op: str, value: Any, operand: Any) -> bool:
    """One condition. `value` is the fact, `operand` the literal (or resolved fact) from the rule."""
    if op == "exists":
        return bool((value is not None) == operand)
    if op == "empty":
        is_empty = value is None or (hasattr(value, "__len__") and len(value) == 0)
        return bool(is_empty == operand)
    if value is None or operand is None:
        return False
    if op == "eq":
        return bool(value == operand)
    if op == "ne":
        return bool(value != operand)
    if op in ("lt", "le", "gt", "ge"):
        return _compare_numbers(op, value, operand)
    if op.startswith("version_"):
        left, right = _version(value), _version(operand)
        if left is None or right is None:
            return False
        return {"version_lt": left < right, "version_le": left <= right,
                "version_gt": left > right, "version_ge": left >= right}[op]
    if op in ("matches", "not_matches"):
        found = re.search(operand, value if isinstance(value, str) else str(value)) is not None
        return found if op == "matches" else not found
    if op in ("contains", "not_contains"):
        inside = operand in value if isinstance(value, str | list | tuple | dict) else False
        return inside if op == "contains" else not inside
    if op in ("in", "not_in"):
        inside = value in operand
        return inside if op == "in" else not inside
    raise ValueError(f"unknown operator {op}")  # the schema makes this unreachable


def rule_matches(rule: Rule, facts: FactView) -> bool:
    if rule.when is None:
        return True
    for path, ops in rule.when.items():
        value = facts.get(path)
        for op, operand in ops.items():
            if isinstance(operand, FactRef):
                operand = facts.get(operand.fact)
                if operand is None:
                    return False
            if not holds(op, value, operand):
                return False
    return True


def evaluate(check: Check, facts: FactView) -> Outcome:
    return evaluate_rules(check.id, check.rules, facts)


def evaluate_rules(check_id: str, rules: list[Rule], facts: FactView) -> Outcome:
    for i, rule in enumerate(rules):
        if rule_matches(rule, facts):
            return Outcome(rule.verdict, render(rule.message, facts), tuple(rule.cases), i)
    raise AssertionError(f"{check_id}: the last rule has no `when`, so one always matches")


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def format_value(value: Any, flt: str = "") -> str:
    if value is None:
        return "?"
    if flt == "bytes" and isinstance(value, int | float):
        return _human_bytes(float(value))
    if flt == "mib" and isinstance(value, int | float):
        return _human_bytes(float(value) * 2**20)
    if flt == "pct" and isinstance(value, int | float):
        return f"{value * 100:.1f} %"
    if flt == "round" and isinstance(value, float):
        return f"{value:.2f}"
    if flt == "last_line":
        lines = [ln.strip() for ln in str(value).splitlines() if ln.strip()]
        return lines[-1][:200] if lines else "?"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render(template: str, facts: FactView) -> str:
    """Fill `{path}` / `{path|filter}` placeholders. The result is plain text; escaping for Slack is the
    presentation layer's job."""

    def fill(m: re.Match[str]) -> str:
        path, _, flt = m.group(1).partition("|")
        return format_value(facts.get(path), flt)

    return PLACEHOLDER_RE.sub(fill, template)
