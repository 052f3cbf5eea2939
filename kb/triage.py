"""Per-component triage (kb/triage/<component>.yaml) and the component map (kb/triage/components.yaml).

A log that no KB case covers is still answered usefully: its root line names a component (bot/diagnosis/root.py), and
that component's triage file says what to look at first, in both languages, with read-only commands and the
host checks (kb/checks/) worth running. components.yaml maps every KB case to a component (by area, with
per-case exceptions) and holds the ordered rules that read a component off a root line no case explains.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kb.loader import KBError, _format_validation

TRIAGE_DIR = Path(__file__).resolve().parent / "triage"
ComponentName = Literal[
    "gpu-memory", "host-memory", "cuda-driver-stack", "python-packages", "model-files", "parallelism",
    "gpu-hardware", "serving-api", "engine-config", "platform", "other",
]
COMPONENT_NAMES: tuple[str, ...] = ComponentName.__args__  # type: ignore[attr-defined]

# A triage command only reads: no writes, installs, kills, restarts, redirections or privilege changes.
_WRITES = re.compile(
    r"(?:^|[\s;&|(])(?:rm|mv|cp|dd|mkfs\w*|kill|pkill|killall|reboot|shutdown|systemctl\s+(?:start|stop|restart)|"
    r"apt(?:-get)?\s+install|yum|dnf|pip3?\s+(?:install|uninstall)|conda\s+install|chmod|chown|sudo|su|"
    r"nvidia-smi\s+(?:-r|--gpu-reset|-pm|-c|-mig)|modprobe|rmmod|tee|sed\s+-i|truncate|curl\s+-X\s*(?:POST|PUT|DELETE))"
    r"(?=$|[\s;&|)])"
    r"|>",
)


def read_only(command: str) -> bool:
    """True when a triage command only reads (no deny-listed verb, no output redirection)."""
    return not _WRITES.search(command.replace("2>&1", "").replace("2>/dev/null", ""))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class TriageStep(_Strict):
    text: str = Field(min_length=3)
    text_zh: str = Field(min_length=2)
    command: str | None = None

    @field_validator("command")
    @classmethod
    def _read_only(cls, v: str | None) -> str | None:
        if v is not None and not read_only(v):
            raise ValueError(f"triage commands must only read: {v!r}")
        return v


class Triage(_Strict):
    component: ComponentName
    title: str = Field(min_length=3)
    title_zh: str = Field(min_length=2)
    steps: list[TriageStep] = Field(min_length=1, max_length=6)
    checks: list[str] = Field(default_factory=list, description="host check ids of kb/checks/ worth running")


class ComponentRule(_Strict):
    component: ComponentName
    pattern: str = Field(min_length=2)
    broad: bool = Field(False, description="a keyword catch-all: an error raised in the application's own code "
                                           "is the application's (`other`), whatever keyword it holds")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"bad regex {v!r}: {exc}") from exc
        return v


class ComponentMap(_Strict):
    areas: dict[str, ComponentName]
    cases: dict[str, ComponentName] = Field(default_factory=dict)
    rules: list[ComponentRule] = Field(min_length=1)
    wrappers: list[str] = Field(default_factory=list, description="regexes of lines that only wrap a cause")
    cause_notices: list[str] = Field(default_factory=list,
                                     description="regexes of INFO/WARNING lines that state a cause")
    stack_names: list[str] = Field(default_factory=list,
                                   description="regexes of the serving stack's object and setting names")
    raised_in: dict[str, ComponentName] = Field(default_factory=dict,
                                                description="file prefix of the raising frame -> component, "
                                                            "when no rule names one")
    libraries: list[str] = Field(default_factory=list,
                                 description="top-level packages of the serving stack: a frame in none of them "
                                             "is the application's code")

    @field_validator("wrappers", "cause_notices", "stack_names")
    @classmethod
    def _patterns_compile(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regex {pattern!r}: {exc}") from exc
        return v

    def for_case(self, case_id: str, area: str) -> ComponentName | None:
        return self.cases.get(case_id) or self.areas.get(area)


def _read(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KBError(path, [f"cannot read: {exc}"]) from exc


def load_triage(directory: Path = TRIAGE_DIR) -> dict[str, Triage]:
    """component → its triage; raises KBError naming the file and field when one is invalid."""
    out: dict[str, Triage] = {}
    for name in COMPONENT_NAMES:
        path = directory / f"{name}.yaml"
        try:
            triage = Triage.model_validate(_read(path))
        except ValidationError as exc:
            raise KBError(path, _format_validation(exc)) from exc
        if triage.component != name:
            raise KBError(path, [f"component {triage.component!r} does not match the file name"])
        out[name] = triage
    return out


def load_component_map(directory: Path = TRIAGE_DIR) -> ComponentMap:
    path = directory / "components.yaml"
    try:
        return ComponentMap.model_validate(_read(path))
    except ValidationError as exc:
        raise KBError(path, _format_validation(exc)) from exc


@cache
def default_triage() -> dict[str, Triage]:
    return load_triage()


@cache
def default_component_map() -> ComponentMap:
    return load_component_map()


__all__ = [
    "COMPONENT_NAMES", "ComponentMap", "ComponentRule", "Triage", "TriageStep", "default_component_map",
    "default_triage", "load_component_map", "load_triage", "read_only",
]
