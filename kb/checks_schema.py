"""Strict schema and loader of the host check catalogue (kb/checks/<area>.yaml).

A check is a fixed command (an argv list or a bundled script), the parser that turns its output into
named facts, and ordered rules over those facts that give a verdict, a message and the KB cases the
finding points to. Nothing here runs anything; bot/runner does. Every model forbids unknown keys, so a
misspelt field is an error naming the file and the field.

File shape:

    area: gpu
    checks:
      - id: gpu.driver                      # <area>.<name>; the area is the file name
        title: NVIDIA driver loaded, NVML answers
        tier: 0                             # 0 read-only/no root/seconds, 1 root or longer, 2 intrusive (opt-in)
        argv: [nvidia-smi]                  # or `script: {file: x.sh, interpreter: sh}` or `needs: [...]`
        timeout_s: 10
        requires: [nvidia-smi]              # binaries that must be on the host's PATH, else `skipped`
        parser: nvidia_smi_header
        rules:                              # first rule whose `when` holds wins; the last has no `when`
          - when: {rc: {ne: 0}}
            verdict: fail
            message: "nvidia-smi failed: {stderr|last_line}"
            cases: [no-gpu-detected]
          - verdict: ok
            message: "driver {driver_version}, CUDA up to {cuda_version}"

Fact paths in `when` keys, `{fact: …}` operands and `{…}` message placeholders:
    name            a fact of this check's parser (or rc, stdout, stderr)
    name.key        one key of a map fact (e.g. vars.HF_HUB_OFFLINE)
    gpu.driver:name a fact of another check listed in `needs` (derived checks)
    host:name       an inventory field of the host (expected_gpus, serve_port, endpoint, …)

`if_missing:` (optional, same rule shape) judges a host where a `requires` binary is absent; its rules
see only `missing` (the absent names) and host fields. Without it such a check is `skipped`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kb.loader import KBError
from kb.schema import CASE_ID_RE

DEFAULT_CHECKS_DIR = Path(__file__).resolve().parent / "checks"
SCRIPTS_DIRNAME = "scripts"

CHECK_ID_RE = re.compile(r"^[a-z]+\.[a-z0-9_]+$")
AREA_RE = re.compile(r"^[a-z]+$")
# Display order of the bundled areas (bottom of the stack first); other areas follow alphabetically.
AREA_ORDER = ("gpu", "cuda", "python", "system", "env", "model", "server")
# A binary name or absolute path the host must have; no shell metacharacters can pass.
BINARY_RE = re.compile(r"^(?:/[A-Za-z0-9._+/-]+|[A-Za-z0-9][A-Za-z0-9._+-]*)$")
FACT_PATH_RE = re.compile(
    r"^(?:(?P<scope>host|[a-z]+\.[a-z0-9_]+):)?(?P<name>[a-z_][a-z0-9_]*)(?:\.(?P<key>[A-Za-z0-9_]+))?$"
)
PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")
TEMPLATE_FILTERS = ("bytes", "mib", "pct", "last_line", "round")

# Inventory fields a command may use as `{name}` in argv/args; values are validated by the inventory
# and quoted by the runner, so they cannot change the command's shape.
HOST_FIELDS = ("python", "serve_port", "endpoint", "model_dir", "served_model", "expected_gpus",
               "gpu_memory_utilization")
COMMAND_PLACEHOLDERS = ("python", "serve_port", "endpoint", "model_dir", "served_model")

Verdict = Literal["ok", "warn", "fail", "error", "skipped", "timeout"]
RuleVerdict = Literal["ok", "warn", "fail", "skipped"]
Op = Literal[
    "eq", "ne", "lt", "le", "gt", "ge",
    "version_lt", "version_le", "version_gt", "version_ge",
    "matches", "not_matches", "contains", "not_contains", "in", "not_in",
    "exists", "empty",
]  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class FactRef(_Strict):
    """An operand that is another fact, e.g. `{fact: "python.torch:cuda"}`."""

    fact: str

    @field_validator("fact")
    @classmethod
    def _path(cls, v: str) -> str:
        if not FACT_PATH_RE.match(v):
            raise ValueError(f"bad fact path {v!r}")
        return v


Scalar = str | bool | int | float
Operand = FactRef | Scalar | list[Scalar] | None


class Script(_Strict):
    """A fixed script shipped in kb/checks/scripts/, fed to the interpreter on stdin."""

    file: str = Field(pattern=r"^[a-z0-9_]+\.(sh|py)$")
    interpreter: Literal["sh", "python"]
    args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _suffix_matches(self) -> Script:
        want = ".py" if self.interpreter == "python" else ".sh"
        if not self.file.endswith(want):
            raise ValueError(f"interpreter {self.interpreter} needs a {want} file, got {self.file}")
        return self


class Rule(_Strict):
    when: dict[str, dict[Op, Operand]] | None = None
    verdict: RuleVerdict
    message: str = Field(min_length=2, max_length=300)
    cases: list[str] = Field(default_factory=list)

    @field_validator("when")
    @classmethod
    def _conditions(cls, v: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("empty `when`; drop it to make the default rule")
        for path, ops in v.items():
            if not FACT_PATH_RE.match(path):
                raise ValueError(f"bad fact path {path!r}")
            if not ops:
                raise ValueError(f"{path}: no operator")
            for op, operand in ops.items():
                _check_operand(path, op, operand)
        return v

    @field_validator("cases")
    @classmethod
    def _case_ids(cls, v: list[str]) -> list[str]:
        for case_id in v:
            if not CASE_ID_RE.match(case_id):
                raise ValueError(f"{case_id!r} is not a case id (lowercase words joined by dashes)")
        return v

    @field_validator("message")
    @classmethod
    def _template(cls, v: str) -> str:
        for placeholder in PLACEHOLDER_RE.findall(v):
            path, _, flt = placeholder.partition("|")
            if not FACT_PATH_RE.match(path):
                raise ValueError(f"message placeholder {{{placeholder}}}: bad fact path {path!r}")
            if flt and flt not in TEMPLATE_FILTERS:
                raise ValueError(f"message placeholder {{{placeholder}}}: unknown filter {flt!r} "
                                 f"(known: {', '.join(TEMPLATE_FILTERS)})")
        return v


def _check_operand(path: str, op: str, operand: Any) -> None:
    if isinstance(operand, FactRef):
        if op in ("exists", "empty", "matches", "not_matches", "in", "not_in"):
            raise ValueError(f"{path}: {op} takes a literal, not a fact reference")
        return
    if op in ("exists", "empty") and not isinstance(operand, bool):
        raise ValueError(f"{path}: {op} takes true or false")
    if op in ("matches", "not_matches"):
        if not isinstance(operand, str):
            raise ValueError(f"{path}: {op} takes a regex string")
        try:
            re.compile(operand)
        except re.error as exc:
            raise ValueError(f"{path}: bad regex {operand!r}: {exc}") from exc
    if op in ("in", "not_in") and not isinstance(operand, list):
        raise ValueError(f"{path}: {op} takes a list")
    if op in ("lt", "le", "gt", "ge") and (isinstance(operand, bool) or not isinstance(operand, int | float)):
        raise ValueError(f"{path}: {op} takes a number or a fact reference")
    if op.startswith("version_") and not isinstance(operand, str):
        raise ValueError(f"{path}: {op} takes a version string (quote it) or a fact reference")


class Check(_Strict):
    id: str
    title: str = Field(min_length=5, max_length=100)
    why: str | None = Field(None, max_length=300, description="One line: why this matters for vLLM")
    tier: Literal[0, 1, 2]
    argv: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)
    script: Script | None = None
    needs: list[str] = Field(default_factory=list, description="Checks whose facts a derived check reads")
    timeout_s: float = Field(10.0, gt=0, le=600)
    requires: list[str] = Field(default_factory=list, description="Binaries that must be on the host's PATH")
    requires_host: list[Literal["serve_port", "endpoint", "model_dir", "served_model", "expected_gpus"]] = Field(
        default_factory=list, description="Inventory fields the host must set, else the check is skipped"
    )
    parser: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]*$")
    rules: list[Rule] = Field(min_length=1)
    if_missing: list[Rule] = Field(
        default_factory=list,
        description="Rules when a `requires` binary is absent (facts: `missing` and host:…); default: skipped",
    )

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not CHECK_ID_RE.match(v):
            raise ValueError("must be <area>.<name>, lowercase, e.g. gpu.driver")
        return v

    @field_validator("requires")
    @classmethod
    def _binaries(cls, v: list[str]) -> list[str]:
        for name in v:
            if not BINARY_RE.match(name):
                raise ValueError(f"{name!r} is not a binary name or absolute path")
        return v

    @field_validator("needs")
    @classmethod
    def _needs(cls, v: list[str]) -> list[str]:
        for check_id in v:
            if not CHECK_ID_RE.match(check_id):
                raise ValueError(f"{check_id!r} is not a check id")
        return v

    @model_validator(mode="after")
    def _shape(self) -> Check:
        kinds = [k for k, present in (("argv", self.argv), ("script", self.script), ("needs", self.needs)) if present]
        if len(kinds) != 1:
            raise ValueError("give exactly one of argv, script or needs (a derived check), got "
                             + (", ".join(kinds) or "none"))
        if self.needs and self.parser:
            raise ValueError("a derived check (needs) has no parser: it reads the facts of the checks it needs")
        if not self.needs and not self.parser:
            raise ValueError("a check with a command needs a parser")
        for text in [*(self.argv or []), *(self.script.args if self.script else [])]:
            for name in PLACEHOLDER_RE.findall(text):
                if name not in COMMAND_PLACEHOLDERS:
                    raise ValueError(f"command placeholder {{{name}}} is not one of "
                                     f"{', '.join(COMMAND_PLACEHOLDERS)}")
        defaults = [i for i, r in enumerate(self.rules) if r.when is None]
        if defaults != [len(self.rules) - 1]:
            raise ValueError("exactly the last rule must have no `when` (the default verdict)")
        if self.if_missing:
            if not self.requires:
                raise ValueError("if_missing needs `requires`: it judges a host without those binaries")
            defaults = [i for i, r in enumerate(self.if_missing) if r.when is None]
            if defaults != [len(self.if_missing) - 1]:
                raise ValueError("exactly the last if_missing rule must have no `when` (the default verdict)")
        return self

    @property
    def derived(self) -> bool:
        return bool(self.needs)


class CheckFile(_Strict):
    area: str
    checks: list[Check] = Field(min_length=1)

    @field_validator("area")
    @classmethod
    def _area(cls, v: str) -> str:
        if not AREA_RE.match(v):
            raise ValueError("must be one lowercase word")
        return v


@dataclass(frozen=True)
class CheckCatalogue:
    """All checks by id, in file order, plus where each came from (for error messages)."""

    checks: dict[str, Check]
    sources: dict[str, str]  # check id -> "gpu.yaml: checks[2]"
    scripts: dict[str, str] = field(default_factory=dict)  # script file name -> its text
    directory: str = ""

    def by_area(self) -> dict[str, list[Check]]:
        out: dict[str, list[Check]] = {}
        for check in self.checks.values():
            out.setdefault(check.id.split(".", 1)[0], []).append(check)
        return out

    def referenced_cases(self) -> dict[str, list[str]]:
        """check id -> the KB case ids its rules point to (in rule order, without duplicates)."""
        out: dict[str, list[str]] = {}
        for check in self.checks.values():
            seen: list[str] = []
            for rule in [*check.rules, *check.if_missing]:
                seen += [c for c in rule.cases if c not in seen]
            out[check.id] = seen
        return out


def _format_validation(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    out = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        # name the check by id, not only by index, so the author finds it
        if len(loc) >= 2 and loc[0] == "checks" and isinstance(loc[1], int):
            try:
                check_id = data["checks"][loc[1]].get("id")
            except (KeyError, IndexError, TypeError, AttributeError):
                check_id = None
            if check_id:
                where = f"{where} (check {check_id})"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (misspelt?)"
        elif err["type"] == "missing":
            msg = "missing required field"
        out.append(f"field '{where}': {msg}")
    return out


def load_check_file(path: Path) -> CheckFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise KBError(path, [f"not UTF-8 ({exc.reason})"]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise KBError(path, [f"{where}YAML syntax error: {getattr(exc, 'problem', None) or exc}"]) from exc
    if not isinstance(data, dict):
        raise KBError(path, ["top level must be a mapping with `area` and `checks`"])
    try:
        parsed = CheckFile.model_validate(data)
    except ValidationError as exc:
        raise KBError(path, _format_validation(exc, data)) from exc
    problems = []
    if parsed.area != path.stem:
        problems.append(f"field 'area': {parsed.area!r} but the file is {path.name}")
    for i, check in enumerate(parsed.checks):
        if not check.id.startswith(parsed.area + "."):
            problems.append(f"field 'checks.{i}.id': {check.id!r} must start with '{parsed.area}.'")
    if problems:
        raise KBError(path, problems)
    return parsed


def load_checks(checks_dir: Path | None = None) -> CheckCatalogue:
    """Load every kb/checks/*.yaml. Raises KBError naming the file and field on the first problem.

    Catalogue-wide rules checked here: unique ids, `needs` point at existing checks without cycles,
    scripts exist. Parser names and fact names are checked by bot.runner.catalogue, which knows the
    parsers; KB case ids by the tests (and `bot.runner.catalogue.validate_case_ids`).
    """
    checks_dir = Path(checks_dir) if checks_dir else DEFAULT_CHECKS_DIR
    files = sorted((p for p in checks_dir.glob("*.yaml") if p.is_file()),
                   key=lambda p: (AREA_ORDER.index(p.stem) if p.stem in AREA_ORDER else len(AREA_ORDER), p.stem))
    if not files:
        raise KBError(checks_dir, ["no check files (*.yaml) found"])
    checks: dict[str, Check] = {}
    sources: dict[str, str] = {}
    scripts: dict[str, str] = {}
    for path in files:
        parsed = load_check_file(path)
        for i, check in enumerate(parsed.checks):
            where = f"{path.name}: checks[{i}]"
            if check.id in checks:
                raise KBError(path, [f"field 'checks.{i}.id': duplicate of {check.id} in {sources[check.id]}"])
            if check.script and check.script.file not in scripts:
                script_path = checks_dir / SCRIPTS_DIRNAME / check.script.file
                try:
                    scripts[check.script.file] = script_path.read_text(encoding="utf-8")
                except OSError as exc:
                    raise KBError(path, [f"field 'checks.{i}.script.file' (check {check.id}): "
                                         f"{script_path} cannot be read: {exc.strerror}"]) from exc
            checks[check.id] = check
            sources[check.id] = where
    for check_id, check in checks.items():
        for i, needed in enumerate(check.needs):
            if needed not in checks:
                raise KBError(checks_dir / sources[check_id].split(":")[0],
                              [f"field 'needs.{i}' (check {check_id}): no check {needed!r}"])
    _reject_cycles(checks, checks_dir, sources)
    return CheckCatalogue(checks, sources, scripts, str(checks_dir))


def _reject_cycles(checks: dict[str, Check], checks_dir: Path, sources: dict[str, str]) -> None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(check_id: str, trail: list[str]) -> None:
        if state.get(check_id) == 2:
            return
        if state.get(check_id) == 1:
            cycle = " -> ".join([*trail[trail.index(check_id):], check_id])
            raise KBError(checks_dir / sources[check_id].split(":")[0], [f"field 'needs': cycle {cycle}"])
        state[check_id] = 1
        for needed in checks[check_id].needs:
            visit(needed, [*trail, check_id])
        state[check_id] = 2

    for check_id in checks:
        visit(check_id, [])
