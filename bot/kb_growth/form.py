"""A new case as a person types it (Slack modal, CLI prompts) → a validated Case, or errors per field.

Text formats, chosen so a case fits a form of plain text boxes:
    fix          one step per line; a line starting with "$ " is the command of the step above it
    signatures   one Python regex per line
    examples     blocks separated by a line "---"; each block: the source URL on its first line, then
                 the log, verbatim
    references   one URL per line (example sources are added automatically)
    keywords     comma-separated
The id is derived from the title unless given. Errors are keyed by these field names, so a form can
show each one on its own input.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from bot.errors import InvalidCase
from bot.kb_growth.suggest import suggest_id
from kb.schema import AREAS, URL_RE, Case

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

FIELDS = ("title", "title_zh", "area", "severity", "cause", "fix", "signatures", "examples", "references", "keywords")
SEVERITIES = ("critical", "high", "medium", "low")
EXAMPLE_SEPARATOR = "---"
_SEPARATOR_RE = re.compile(r"^\s*-{3,}\s*$")


@dataclass
class CaseForm:
    title: str = ""
    title_zh: str = ""
    area: str = ""
    severity: str = "medium"
    cause: str = ""
    fix: str = ""
    signatures: str = ""
    examples: str = ""
    references: str = ""
    keywords: str = ""
    case_id: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def parse_fix(text: str) -> list[dict[str, str]]:
    steps: list[dict[str, str]] = []
    for line in _lines(text):
        if line.startswith("$ ") or line == "$":
            # `vllm serve MODEL` as people type it → the placeholder the log fills (kb.schema.PLACEHOLDERS)
            command = re.sub(r"\b(MODEL_DIR|MODEL)\b", lambda m: "{" + m.group(1).lower() + "}", line[1:].strip())
            if not steps:
                raise ValueError("a command line ($ …) must follow the step it belongs to")
            if not command:
                continue
            prev = steps[-1]
            prev["command"] = f"{prev['command']}\n{command}" if prev.get("command") else command
        else:
            steps.append({"text": re.sub(r"^(?:\d+[.)]|[-*•])\s+", "", line)})
    return steps


def parse_examples(text: str) -> list[dict[str, str]]:
    blocks: list[list[str]] = [[]]
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if _SEPARATOR_RE.match(line):
            blocks.append([])
        else:
            blocks[-1].append(line.rstrip())
    examples = []
    for n, block in enumerate((b for b in blocks if any(x.strip() for x in b)), 1):
        while block and not block[0].strip():
            block.pop(0)
        source = block[0].strip()
        if not URL_RE.match(source):
            raise ValueError(
                f"example {n}: the first line must be the URL where the log was posted, not {source[:60]!r}"
            )
        log = "\n".join(block[1:]).strip("\n")
        if not log.strip():
            raise ValueError(f"example {n}: the log is empty (paste it under the URL)")
        examples.append({"source": source, "log": log + "\n"})
    return examples


def form_to_case(form: CaseForm) -> Case:
    """Raises InvalidCase with one message per form field."""
    problems: dict[str, str] = {}
    data: dict[str, object] = {
        "id": (form.case_id or suggest_id(form.title)).strip(),
        "title": form.title.strip(),
        "title_zh": form.title_zh.strip(),
        "area": form.area.strip(),
        "severity": (form.severity or "medium").strip(),
        "cause": " ".join(form.cause.split()),
        "signatures": _lines(form.signatures),
        "keywords": [k.strip() for k in re.split(r"[,\n]", form.keywords or "") if k.strip()],
    }
    for name, parser in (("fix", parse_fix), ("examples", parse_examples)):
        try:
            data[name] = parser(getattr(form, name))
        except ValueError as exc:
            problems[name] = str(exc)
    references = _lines(form.references)
    examples = data.get("examples")  # parse_examples' list, absent when it failed
    for ex in examples if isinstance(examples, list) else []:
        if ex["source"] not in references:
            references.append(ex["source"])
    data["references"] = references
    if data["area"] not in AREAS:
        problems.setdefault("area", f"choose one of: {', '.join(AREAS)}")
    if problems:
        data = {k: v for k, v in data.items() if k not in problems}
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            field, message = _field_message(err)
            if field in problems and field in ("fix", "examples"):
                continue
            problems.setdefault(field, message)
        raise InvalidCase(problems) from exc
    if problems:
        raise InvalidCase(problems)
    return case


def _field_message(err: ErrorDetails) -> tuple[str, str]:
    loc = list(err.get("loc") or ())
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "missing":
        msg = "required"
    top = str(loc[0]) if loc else "title"
    field = {"id": "title"}.get(top, top)
    if field == "id" or top == "id":
        msg = f"the id derived from the title is not valid ({msg})"
    if field in ("fix", "examples") and len(loc) >= 2 and isinstance(loc[1], int):
        what = "step" if field == "fix" else "example"
        msg = f"{what} {loc[1] + 1}: {msg}"
    if field == "examples" and err.get("type") == "too_short":
        msg = "a case needs at least two example logs (docs/kb-authoring.md); add another occurrence"
    if field == "fix" and err.get("type") == "too_short":
        msg = "write at least one fix step"
    if field == "signatures" and err.get("type") == "too_short":
        msg = "give at least one signature (a regex that fingerprints this failure)"
    if field not in FIELDS:
        field = "title"
    return field, msg


def case_to_form(case: Case) -> CaseForm:
    fix_lines: list[str] = []
    for step in case.fix:
        fix_lines.append(step.text)
        fix_lines += [f"$ {c}" for c in (step.command or "").splitlines() if c.strip()]
    examples = f"\n{EXAMPLE_SEPARATOR}\n".join(f"{ex.source}\n{ex.log.rstrip()}" for ex in case.examples)
    return CaseForm(
        title=case.title,
        title_zh=case.title_zh,
        area=case.area,
        severity=case.severity,
        cause=case.cause,
        fix="\n".join(fix_lines),
        signatures="\n".join(case.signatures),
        examples=examples,
        references="\n".join(r for r in case.references if r not in {ex.source for ex in case.examples}),
        keywords=", ".join(case.keywords),
        case_id=case.id,
    )
