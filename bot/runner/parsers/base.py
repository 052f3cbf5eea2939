"""The parser registry: a parser turns one command's output into named facts for the rules.

Each parser declares the facts it returns, so the catalogue loader can reject a rule that names a fact no
parser provides (a typo would otherwise silently never fire). Map facts (e.g. `vars`) may be indexed in
rules as `vars.NAME`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Facts = dict[str, Any]


class ParseError(Exception):
    """The output does not have the expected shape; the check's verdict becomes `error`."""


class Unavailable(Exception):
    """The tool answered that it cannot do this on this host (e.g. the NVIDIA driver is not loaded): the
    check's verdict becomes `skipped` with this message, and the check that owns the cause reports it."""


@dataclass(frozen=True)
class Output:
    stdout: str
    stderr: str = ""
    rc: int = 0


@dataclass(frozen=True)
class Parser:
    name: str
    func: Callable[[Output], Facts]
    facts: frozenset[str]
    maps: frozenset[str]  # facts that are dicts and may be indexed as name.KEY

    def __call__(self, out: Output) -> Facts:
        facts = self.func(out)
        unknown = set(facts) - self.facts
        if unknown:  # a parser bug, not bad input: fail loudly in tests
            raise AssertionError(f"parser {self.name} returned undeclared facts {sorted(unknown)}")
        return {name: facts.get(name) for name in self.facts}


REGISTRY: dict[str, Parser] = {}


def parser(
    name: str, facts: list[str] | tuple[str, ...], maps: tuple[str, ...] = ()
) -> Callable[[Callable[[Output], Facts]], Callable[[Output], Facts]]:
    """Register `func` under `name`, declaring the facts it returns (absent ones become None)."""

    def register(func: Callable[[Output], Facts]) -> Callable[[Output], Facts]:
        if name in REGISTRY:
            raise ValueError(f"parser {name} registered twice")
        REGISTRY[name] = Parser(name, func, frozenset(facts) | frozenset(maps), frozenset(maps))
        return func

    return register


def load_json(out: Output) -> dict[str, Any]:
    """A probe script prints one JSON object on stdout (maybe after noise from imported libraries)."""
    text = out.stdout.strip()
    start = text.rfind("\n{")
    candidate = text[start + 1 :] if start >= 0 else text
    try:
        data = json.loads(candidate)
    except json.JSONDecodeError as exc:
        first = (out.stderr.strip().splitlines() or out.stdout.strip().splitlines() or ["no output"])[-1]
        raise ParseError(f"probe printed no JSON (rc {out.rc}): {first[:200]}") from exc
    if not isinstance(data, dict):
        raise ParseError("probe JSON is not an object")
    return data


def to_number(text: str) -> int | float | None:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def error_line(out: Output) -> str:
    """The most telling line of a failed command: last non-empty stderr line, else stdout."""
    for stream in (out.stderr, out.stdout):
        lines = [ln.strip() for ln in stream.splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return f"exit status {out.rc}, no output"
