"""A case's `affects` / `fixed_in` read against the versions known for a paste (issue 9, item 4).

Pure functions over typed values: the versions the log printed (bot/diagnosis/facts.py `LogFacts`) and, in a Slack
thread where `/vllm-diagnose` ran, the versions the host checks found (bot/slack/thread_facts.py). The log
wins where both say something: it is the run that failed, the host may have changed since.

Outcomes for one case: a note (a `bot.models.Note` value, e.g. kind "upgrade": fixed in vllm 0.6.4, the log shows
0.5.3; the presentation words it, bot/present/i18n.py), and
whether the version shown already has the fix (or lies outside `affects`), which the matcher ranks down
(`MatchParams.fixed_version_penalty`). No version known: nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from bot.models import LogFacts, Note, NoteKind

# Package name in case YAML → the LogFacts field that holds its version.
LOG_FIELDS: dict[str, str] = {
    "vllm": "vllm_version",
    "torch": "torch_version",
    "cuda": "cuda_version",
    "driver": "driver_version",
    "python": "python_version",
}
# Package name → (host check id, fact name) in a /vllm-diagnose report (the same facts as
# bot/report_draft.environment_from_host).
HOST_FACTS: dict[str, tuple[str, str]] = {
    "vllm": ("python.vllm_install", "version"),
    "torch": ("python.torch", "version"),
    "cuda": ("python.torch", "cuda"),
    "driver": ("gpu.driver", "driver_version"),
    "python": ("python.runtime", "version"),
}


@dataclass(frozen=True)
class KnownVersion:
    version: Version
    text: str  # as printed, e.g. "0.5.3.post1"
    source: Literal["log", "host"]
    host: str = ""  # the host label when source == "host"


@dataclass(frozen=True)
class VersionCheck:
    """What one case's version fields say about this paste."""

    note: Note | None = None
    superseded: bool = False  # the version shown already has the fix, or lies outside `affects`: rank down


Versions = Mapping[str, KnownVersion]


def _parse(text: object) -> Version | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def known_versions(
    facts: LogFacts | None, host: Mapping[str, str] | None = None, host_label: str = ""
) -> dict[str, KnownVersion]:
    """package → the version known for this paste: the log's first, then the host's. Unparseable ones are
    left out (a version that cannot be compared says nothing)."""
    out: dict[str, KnownVersion] = {}
    for package, text in (host or {}).items():
        parsed = _parse(text)
        if parsed is not None and package in LOG_FIELDS:
            out[package] = KnownVersion(parsed, text.strip(), "host", host_label)
    if facts is not None:
        for package, name in LOG_FIELDS.items():
            text = getattr(facts, name)
            parsed = _parse(text)
            if parsed is not None:
                out[package] = KnownVersion(parsed, str(text).strip(), "log")
    return out


def host_versions(check_facts: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """(check id, facts) of one host's /vllm-diagnose run → package → version, for the packages cases name."""
    by_check: dict[str, Mapping[str, Any]] = {}
    for check_id, facts in check_facts:
        by_check.setdefault(check_id, facts or {})
    out: dict[str, str] = {}
    for package, (check_id, name) in HOST_FACTS.items():
        value = by_check.get(check_id, {}).get(name)
        if isinstance(value, (str, int, float)) and _parse(str(value)) is not None:
            out[package] = str(value)
    return out


def report_versions(report: Any) -> dict[str, str]:
    """The versions every checked host of a /vllm-diagnose report agrees on (one host: all of its own)."""
    per_host = [host_versions((c.id, c.facts) for c in h.checks) for h in report.hosts if not h.error]
    if not per_host:
        return {}
    return {k: v for k, v in per_host[0].items() if all(other.get(k) == v for other in per_host[1:])}


def report_gpus(report: Any) -> int | None:
    """The GPUs the one checked host of a /vllm-diagnose report counted (nvidia-smi), for {tp_fit}; None for a
    group (hosts differ) or when no check counted them."""
    checked = [h for h in report.hosts if not h.error]
    if len(checked) != 1:
        return None
    for check in checked[0].checks:
        count = (check.facts or {}).get("gpu_count")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return count
    return None


def _note(kind: NoteKind, package: str, version: str, known: KnownVersion) -> Note:
    return Note(kind, package=package, version=version, shown=known.text, source=known.source, host=known.host)


def check_case(affects: Mapping[str, str], fixed_in: Mapping[str, str], versions: Versions) -> VersionCheck:
    """The note and rank-down for one case. `fixed_in` speaks first (it says what to do); `affects` only
    when no `fixed_in` entry could be compared."""
    if not versions:
        return VersionCheck()
    for package, fixed_text in fixed_in.items():
        known, fixed = versions.get(package), _parse(fixed_text)
        if known is None or fixed is None:
            continue
        if known.version >= fixed:
            return VersionCheck(_note("already_fixed", package, fixed_text, known), True)
        return VersionCheck(_note("upgrade", package, fixed_text, known))
    for package, spec_text in affects.items():
        known = versions.get(package)
        if known is None:
            continue
        try:
            inside = SpecifierSet(spec_text).contains(known.version, prereleases=True)
        except InvalidSpecifier:
            continue
        kind: NoteKind = "inside_affects" if inside else "outside_affects"
        return VersionCheck(_note(kind, package, spec_text, known), not inside)
    return VersionCheck()


__all__ = ["HOST_FACTS", "LOG_FIELDS", "KnownVersion", "VersionCheck", "Versions", "check_case", "host_versions",
           "known_versions"]
