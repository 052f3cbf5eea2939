"""Load the check catalogue and check it against the code: parser names exist, every fact a rule or
message names is one the parser (or a needed check, or the inventory) provides, case ids exist.

kb/checks_schema.py validates each file on its own; this module knows the parsers, so it can reject
`when: {driver_versoin: …}` with the file, the check and the field, instead of a rule that never fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from bot.runner.parsers import REGISTRY
from bot.runner.rules import BUILTIN_FACTS
from kb.checks_schema import (
    FACT_PATH_RE,
    HOST_FIELDS,
    PLACEHOLDER_RE,
    Check,
    CheckCatalogue,
    FactRef,
    Rule,
    load_checks,
)
from kb.loader import KBError

MISSING_FACT = "missing"  # the only own fact of `if_missing` rules: the absent binaries


def _fact_paths(check: Check, rules: list[Rule] | None = None, field: str = "rules") -> Iterable[tuple[str, str]]:
    """(where, path) for every fact a check's rules (or `if_missing` rules) mention."""
    for i, rule in enumerate(check.rules if rules is None else rules):
        for path, ops in (rule.when or {}).items():
            yield f"{field}.{i}.when", path
            for op, operand in ops.items():
                if isinstance(operand, FactRef):
                    yield f"{field}.{i}.when.{path}.{op}", operand.fact
        for placeholder in PLACEHOLDER_RE.findall(rule.message):
            yield f"{field}.{i}.message", placeholder.partition("|")[0]


def _facts_of(check: Check) -> tuple[frozenset[str], frozenset[str]]:
    if check.parser is None:
        return frozenset(), frozenset()
    p = REGISTRY[check.parser]
    return p.facts | frozenset(BUILTIN_FACTS), p.maps


def _path_problem(path: str, check: Check, checks: dict[str, Check]) -> str | None:
    m = FACT_PATH_RE.match(path)
    assert m is not None  # the schema checked the shape
    scope, name, key = m["scope"], m["name"], m["key"]
    if scope == "host":
        return None if name in HOST_FIELDS and key is None else f"host has no field {name!r} (known: {', '.join(HOST_FIELDS)})"
    if scope is not None:
        if scope not in check.needs:
            return f"{path!r} reads check {scope} which is not listed in `needs`"
        source = checks[scope]
        if source.derived:
            return f"{path!r}: {scope} is a derived check and has no facts of its own"
    else:
        if check.derived:
            return f"{path!r}: a derived check has no facts of its own; write <check id>:{name}"
        source = check
    facts, maps = _facts_of(source)
    if name not in facts:
        return f"parser {source.parser} provides no fact {name!r} (it has: {', '.join(sorted(facts))})"
    if key is not None and name not in maps:
        return f"fact {name!r} of parser {source.parser} is not a map; drop '.{key}'"
    return None


def validate(catalogue: CheckCatalogue) -> None:
    """Raise KBError (file + check + field) for parser/fact mistakes the per-file schema cannot see."""
    directory = Path(catalogue.directory)
    for check_id, check in catalogue.checks.items():
        file_name = catalogue.sources[check_id].split(":")[0]
        if check.parser is not None and check.parser not in REGISTRY:
            raise KBError(directory / file_name, [f"field 'parser' (check {check_id}): no parser {check.parser!r} "
                                                  f"(known: {', '.join(sorted(REGISTRY))})"])
        problems = []
        for i, needed in enumerate(check.needs):
            if catalogue.checks[needed].tier > check.tier:
                problems.append(f"field 'needs.{i}' (check {check_id}): {needed} is tier "
                                f"{catalogue.checks[needed].tier}, above this check's tier {check.tier}")
        for where, path in _fact_paths(check):
            problem = _path_problem(path, check, catalogue.checks)
            if problem:
                problems.append(f"field '{where}' (check {check_id}): {problem}")
        for where, path in _fact_paths(check, check.if_missing, "if_missing"):
            if path != MISSING_FACT and not path.startswith("host:"):
                problems.append(f"field '{where}' (check {check_id}): if_missing rules see only "
                                f"{MISSING_FACT!r} and host fields, not {path!r}")
            elif path.startswith("host:") and (problem := _path_problem(path, check, catalogue.checks)):
                problems.append(f"field '{where}' (check {check_id}): {problem}")
        if problems:
            raise KBError(directory / file_name, problems)


def unknown_case_ids(catalogue: CheckCatalogue, known: Iterable[str]) -> dict[str, list[str]]:
    """check id -> case ids its rules point to that are not in `known`."""
    known_set = set(known)
    out: dict[str, list[str]] = {}
    for check_id, cases in catalogue.referenced_cases().items():
        missing = [c for c in cases if c not in known_set]
        if missing:
            out[check_id] = missing
    return out


def load_catalogue(checks_dir: Path | str | None = None) -> CheckCatalogue:
    """The validated catalogue. Cached per directory: the files are part of the deployment."""
    return _load_cached(str(Path(checks_dir).resolve()) if checks_dir else "")


@lru_cache(maxsize=8)
def _load_cached(checks_dir: str) -> CheckCatalogue:
    catalogue = load_checks(Path(checks_dir) if checks_dir else None)
    validate(catalogue)
    return catalogue


def select_checks(
    catalogue: CheckCatalogue, wanted: list[str] | None, max_tier: int
) -> tuple[list[Check], list[str]]:
    """The checks to run, in catalogue order, with the checks they need added. `wanted` entries are check
    ids or areas (`gpu`). Problems (unknown names, a named check above `max_tier`) come back as messages
    so the caller can refuse the request; naming a check never raises its tier on its own."""
    checks = catalogue.checks
    areas = catalogue.by_area()
    problems: list[str] = []
    chosen: set[str] = set()
    if wanted:
        for name in wanted:
            if name in checks:
                if checks[name].tier > max_tier:
                    problems.append(f"{name} is a tier {checks[name].tier} check; ask for tier {checks[name].tier} "
                                    "to run it")
                else:
                    chosen.add(name)
            elif name in areas:
                chosen.update(c.id for c in areas[name] if c.tier <= max_tier)
            else:
                problems.append(f"no check or area named {name!r} (areas: {', '.join(areas)}; "
                                "`vllm-doctor diagnose --list` shows every check)")
    else:
        chosen = {c.id for c in checks.values() if c.tier <= max_tier}
    stack = list(chosen)
    while stack:
        for needed in checks[stack.pop()].needs:
            if needed not in chosen:
                chosen.add(needed)
                stack.append(needed)
    return [c for c in checks.values() if c.id in chosen], problems
