"""Signatures written by users (`kb add`, the Slack form) must not be able to stall the bot.

The matcher runs signatures with Python's backtracking `re`: a pattern such as `(\\w+\\s?)*$` takes
exponential time on a line it almost matches (300 s of CPU on one log line, issue 28). So a signature that
is new to the KB is accepted only if

- RE2, a linear-time engine, can compile it: no lookarounds, backreferences, possessive quantifiers or
  atomic groups (the constructs that need backtracking), and
- it has no unbounded quantifier inside another one (`(a+)*`, `(\\w+\\s?)*`): RE2 would run those in linear
  time, but `re` does not.

The curated KB's own signatures (some use lookaheads) are reviewed in git and keep running on `re`; they
are not checked here. This is the only module that imports re2 (google-re2).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import re2

_parser: Any = importlib.import_module("re._parser")  # the stdlib's regex parser (no stub for mypy)
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_LARGE = 64  # a counted repeat above this many is as bad as an unbounded one when nested

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print each refusal on stderr


def unsafe_signature(pattern: str) -> str | None:
    """Why `pattern` may not become a signature (one line, for the author), or None when it is safe."""
    try:
        re2.compile(pattern, options=_OPTIONS)
    except Exception as exc:  # noqa: BLE001 - re2 raises its own error type, or TypeError on odd input
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return (
            f"{pattern!r} is refused by the linear-time regex check (RE2: {reason}); new signatures may not use "
            "lookarounds, backreferences, possessive quantifiers, atomic groups or repeat counts above 1000"
        )
    try:
        tree = _parser.parse(pattern)
    except re.error as exc:
        return f"{pattern!r} is not a valid regex: {exc}"
    if _nested_unbounded(tree, inside=False):
        return (
            f"{pattern!r} repeats a group that itself repeats (like (\\w+\\s?)*), which can take exponential "
            "time on a line that almost matches: write it with one quantifier, e.g. [\\w\\s]*"
        )
    return None


def _nested_unbounded(items: Any, inside: bool) -> bool:
    """True when an unbounded (or large) repeat holds another one, at any depth."""
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = av
            unbounded = high == _parser.MAXREPEAT or high > _LARGE
            if unbounded and inside:
                return True
            if _nested_unbounded(body, inside or unbounded):
                return True
        elif name == "SUBPATTERN":
            if _nested_unbounded(av[-1], inside):
                return True
        elif name == "BRANCH":
            if any(_nested_unbounded(branch, inside) for branch in av[1]):
                return True
        elif name in ("ATOMIC_GROUP",):
            if _nested_unbounded(av, inside):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _nested_unbounded(av[1], inside):
                return True
    return False
