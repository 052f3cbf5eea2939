"""Case ⇄ YAML text in the house format of kb/cases (docs/kb-authoring.md).

`render_case` writes fields in schema order, leaves out empty optional fields, and uses literal blocks
(`|`) for multi-line text so example logs stay verbatim and readable in review diffs. Every rendering is
parsed back and compared with the case before anyone writes it, so a YAML quirk can never change a case.
`parse_case_text` is the strict reader for `kb add --from-file`: errors name the file and the field (or
the YAML line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bot.diagnosis.paste import redacted
from kb.loader import KBError, parse_case_text  # noqa: F401 - re-exported for bot.kb_growth users
from kb.schema import Case

# Optional fields left out of the file when they hold their default (keeps new files as short as the
# hand-written ones).
_OMIT_WHEN_EMPTY = (
    "rules", "keywords", "frames", "checks", "affects", "fixed_in", "summary_zh", "cause_zh", "keywords_zh",
)


class _CaseDumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_CaseDumper.add_representer(str, _str_representer)


def _clean_block(text: str) -> str:
    """Trailing spaces and tabs would force PyYAML out of the literal style; they carry no meaning."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


# Fields kept verbatim: regexes (a redaction mark would change what they match) and identifiers.
_NOT_REDACTED = frozenset({"id", "signatures", "area", "severity", "role", "checks"})


def _redacted(value: Any) -> Any:
    """Every string in a case's data, redacted: a case comes from user text (Slack form, `kb add`)."""
    if isinstance(value, str):
        return redacted(value).text
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: (v if k in _NOT_REDACTED else _redacted(v)) for k, v in value.items()}
    return value


def case_to_data(case: Case) -> dict[str, Any]:
    """The case as plain data, as it will be written: secrets redacted, log blocks cleaned."""
    data: dict[str, Any] = _redacted(case.model_dump(mode="json", exclude_none=True))
    for key in _OMIT_WHEN_EMPTY:
        if not data.get(key):
            data.pop(key, None)
    for example in data.get("examples", []):
        example["log"] = _clean_block(example["log"])
    for step in data.get("fix", []):
        if not step.get("command"):
            step.pop("command", None)
        if not step.get("text_zh"):
            step.pop("text_zh", None)
    return data


def render_case(case: Case) -> str:
    """YAML text for `case`; raises ValueError if it would not read back as the same case."""
    data = case_to_data(case)
    text = yaml.dump(data, Dumper=_CaseDumper, sort_keys=False, allow_unicode=True, width=110, indent=2)
    again = Case.model_validate(yaml.safe_load(text))
    if again != Case.model_validate(data):
        raise ValueError(f"case {case.id}: YAML rendering does not round-trip")
    return text


def normalised(case: Case) -> Case:
    """The case as it will read back from its file (log blocks cleaned the way render_case writes them)."""
    return Case.model_validate(case_to_data(case))


def parse_case_file(path: Path, max_bytes: int = 32 * 1024 * 1024) -> Case:
    """A case file, read no further than `max_bytes` + 1 (a device or a FIFO is not read to its end)."""
    from bot.diagnosis.paste import read_limited
    from bot.errors import InputTooLarge

    try:
        with open(path, "rb") as src:
            data = read_limited(src, max_bytes, str(path))
        text = data.decode("utf-8")
    except InputTooLarge as exc:
        raise KBError(path, [str(exc)]) from None
    except UnicodeDecodeError as exc:
        raise KBError(path, [f"not UTF-8 ({exc.reason})"]) from exc
    except OSError as exc:
        raise KBError(path, [f"cannot read: {exc.strerror or exc}"]) from exc
    return parse_case_text(text, path)
