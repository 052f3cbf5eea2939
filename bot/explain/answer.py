"""The LLM's answer: the JSON schema it is asked for, the validation of what comes back, and the
streaming preview that turns the half-written JSON into readable text.

Grounding: the server is asked for JSON constrained by a schema whose case_id is an enum of the
retrieved ids plus "none" (OpenAI `response_format` json_schema; vLLM compiles it with xgrammar, which
works on the CPU build too). The answer is validated again here, because a server may ignore the schema
(llm_structured_outputs=off, or one that rejects it in auto mode).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from bot.explain.allowlist import command_allowed
from bot.present.i18n import is_language, t

CONFIDENCES: tuple[str, ...] = ("low", "medium", "high")

# Limits on what comes back.
SUMMARY_MAX, WHY_MAX, STEP_MAX, STEPS_MAX = 300, 800, 300, 6
# Schema string limits are sized so that any schema-valid answer fits in max_tokens: a model that never
# stops writing (as the random-weight test model does) then still produces complete, valid JSON.
CHARS_PER_ANSWER_TOKEN = 2.0
JSON_OVERHEAD_CHARS = 160


# --- schema -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerLimits:
    summary: int
    why: int
    step: int
    steps: int = STEPS_MAX

    @classmethod
    def for_tokens(cls, max_tokens: int) -> AnswerLimits:
        chars = max(200, int(max_tokens * CHARS_PER_ANSWER_TOKEN) - JSON_OVERHEAD_CHARS)
        return cls(
            summary=min(SUMMARY_MAX, int(chars * 0.12)),
            why=min(WHY_MAX, int(chars * 0.33)),
            step=min(STEP_MAX, int(chars * 0.55) // STEPS_MAX),
        )


DEFAULT_LIMITS = AnswerLimits(SUMMARY_MAX, WHY_MAX, STEP_MAX)


def answer_schema(allowed_ids: Sequence[str], limits: AnswerLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """JSON schema of the answer; the server constrains decoding with it, we validate against it."""
    text = {"type": "string", "minLength": 1}
    return {
        "type": "object",
        "properties": {
            "case_id": {"type": "string", "enum": list(allowed_ids)},
            "summary": {**text, "maxLength": limits.summary},
            "why": {**text, "maxLength": limits.why},
            "fix_steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": limits.steps,
                "items": {**text, "maxLength": limits.step},
            },
            "confidence": {"type": "string", "enum": list(CONFIDENCES)},
        },
        "required": ["case_id", "summary", "why", "fix_steps", "confidence"],
        "additionalProperties": False,
    }


# --- answer validation ------------------------------------------------------------------------------
class AnswerRejected(ValueError):
    """The LLM answered, but not with something we can show. str() is the one-line reason."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise AnswerRejected(f"expected text, got {type(value).__name__}")
    text = " ".join(_CONTROL.sub(" ", value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_answer(text: str, allowed_ids: Sequence[str], *, trusted_commands: Collection[str] = (),
                 lang: str = "en") -> dict[str, Any]:
    """Validate the LLM's JSON. Raises AnswerRejected with a one-line reason. A command the LLM wrote in a
    fix step is shown as a command only if a retrieved KB case has it (`trusted_commands`) or it is a
    read-only diagnostic (bot/explain/allowlist.py); otherwise the step shows it as plain text, warned."""
    stripped = text.strip()
    if not stripped:
        raise AnswerRejected("the LLM returned an empty answer")
    # Without schema enforcement a model may wrap the object in a ``` fence; accept exactly that much.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", stripped, re.S)
    if fenced:
        stripped = fenced.group(1)
    try:
        # strict=False: xgrammar lets raw control characters into JSON strings; _clean removes them
        data = json.loads(stripped, strict=False)
    except json.JSONDecodeError as exc:
        raise AnswerRejected(f"the LLM's answer is not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict):
        raise AnswerRejected("the LLM's answer is not a JSON object")
    case_id = data.get("case_id")
    if not isinstance(case_id, str) or case_id.strip() not in allowed_ids:
        raise AnswerRejected(f"the LLM cited case {str(case_id)[:60]!r}, which was not retrieved")
    summary = _clean(data.get("summary", ""), SUMMARY_MAX)
    why = _clean(data.get("why", ""), WHY_MAX)
    raw_steps = data.get("fix_steps", [])
    if isinstance(raw_steps, str):
        raw_steps = [raw_steps]
    if not isinstance(raw_steps, list):
        raise AnswerRejected("fix_steps is not a list")
    steps = [guard_step(s, trusted_commands, lang) for s in (_clean(x, STEP_MAX) for x in raw_steps[:STEPS_MAX]) if s]
    if not summary:
        raise AnswerRejected("the LLM's answer has an empty summary")
    if not steps:
        raise AnswerRejected("the LLM's answer has no fix steps")
    confidence = str(data.get("confidence", "")).strip().lower()
    return {
        "case_id": case_id.strip(),
        "summary": summary,
        "why": why,
        "fix_steps": steps,
        "confidence": confidence if confidence in CONFIDENCES else "low",
    }


_CODE_SPAN = re.compile(r"`+([^`]+)`+")
# a command written outside a code span that must not read like advice either
_SHELL_IN_TEXT = re.compile(
    r"\|\s*(?:sudo\s+)?(?:ba|z|da|k|c|tc)?sh\b|\|\s*(?:sudo\s+)?python3?\b|\brm\s+-[a-z]*[rf]|\bmkfs\b|\bdd\s+if=|"
    r"\bchmod\s+(?:-R\s+)?777\b|:\(\)\s*\{",
    re.I,
)
_SHELL_CHARS = set("|;&$<>()`*?'\"\\")
_DANGEROUS_WORDS = {"reboot", "shutdown", "halt", "poweroff", "rm", "mkfs", "dd", "kill", "killall", "pkill", "sudo",
                    "su", "init", "telinit", "sh", "bash", "zsh", "curl", "wget"}


def guard_step(step: str, trusted_commands: Collection[str] = (), lang: str = "en") -> str:
    """One fix step as it may be shown. Each code span is a literal (a flag, setting, path, error text),
    a command of a retrieved KB case, or an allow-listed read-only diagnostic; anything else loses its code
    formatting and the step gets a warning in the answer's language, so it is never offered as a command."""
    unchecked = False

    def code(m: re.Match[str]) -> str:
        nonlocal unchecked
        body = m.group(1).strip()
        if body in trusted_commands or _literal(body) or command_allowed(body):
            return m.group(0)
        unchecked = True
        return body

    shown = _CODE_SPAN.sub(code, step)
    if not unchecked and _SHELL_IN_TEXT.search(_CODE_SPAN.sub(" ", shown)):
        unchecked = True
    if not unchecked:
        return shown
    plain = " ".join(shown.replace("`", "").split())
    return f"{plain} ({t('text.unchecked_command', 'zh' if lang == 'zh' else 'en')})"


def _literal(body: str) -> bool:
    """Nothing a shell would act on: one word (gpu_memory_utilization, /dev/shm) or flags (--enforce-eager)."""
    if not body or any(ch in _SHELL_CHARS for ch in body):
        return False
    if body.startswith("-"):  # flags and their values: `--gpu-memory-utilization 0.8` runs nothing by itself
        return True
    return not any(ch.isspace() for ch in body) and body not in _DANGEROUS_WORDS


def answer_in_language(fields: dict[str, Any], lang: str) -> bool:
    """Whether the validated answer's prose is in the asker's language (code spans are not counted)."""
    prose = " ".join([fields["summary"], fields["why"], *fields["fix_steps"]])
    return is_language(prose, "zh" if lang == "zh" else "en")


# --- streaming preview ------------------------------------------------------------------------------
class PreviewScanner:
    """Turns the JSON answer, chunk by chunk, into readable text deltas: summary, why, then numbered
    fix steps, in the order the model writes them. Incremental: each character is looked at once."""

    _SHOWN = {"summary", "why"}

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False
        self._unicode: str | None = None
        self._high_surrogate: int | None = None
        self._is_key = False
        self._expect_key = False
        self._key_buf: list[str] = []
        self._key = ""
        self._emitting = False
        self._steps = 0
        self._written = False
        self.text = ""

    def feed(self, chunk: str) -> str:
        out: list[str] = []
        for ch in chunk:
            if self._in_string:
                self._string_char(ch, out)
            elif ch == '"':
                self._open_string(out)
            elif ch in "{[":
                self._stack.append(ch)
                self._expect_key = ch == "{"
            elif ch in "}]":
                if self._stack:
                    self._stack.pop()
                self._expect_key = False
            elif ch == ":":
                self._expect_key = False
            elif ch == ",":
                self._expect_key = bool(self._stack) and self._stack[-1] == "{"
        delta = "".join(out)
        self.text += delta
        return delta

    def _open_string(self, out: list[str]) -> None:
        self._in_string = True
        self._is_key = self._expect_key
        self._key_buf = []
        depth = len(self._stack)
        self._emitting = False
        if self._is_key:
            return
        if depth == 1 and self._key in self._SHOWN:
            self._emitting = True
            if self._written:
                out.append("\n\n")
        elif depth == 2 and self._key == "fix_steps" and self._stack[-1] == "[":
            self._emitting = True
            self._steps += 1
            out.append(("\n\n" if self._steps == 1 else "\n") if self._written else "")
            out.append(f"{self._steps}. ")
        if self._emitting:
            self._written = True

    def _string_char(self, ch: str, out: list[str]) -> None:
        if self._unicode is not None:
            self._unicode += ch
            if len(self._unicode) == 4:
                try:
                    code = int(self._unicode, 16)
                except ValueError:
                    code = 0x20
                self._unicode = None
                if 0xD800 <= code <= 0xDBFF:  # first half of a surrogate pair (\ud83d\ude00 = one emoji)
                    self._high_surrogate = code
                    return
                if 0xDC00 <= code <= 0xDFFF:
                    if self._high_surrogate is not None:
                        self._char(
                            chr(0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)), out
                        )
                    self._high_surrogate = None
                    return  # a lone half cannot be shown
                self._high_surrogate = None
                self._char(chr(code), out)
            return
        if self._escape:
            self._escape = False
            if ch == "u":
                self._unicode = ""
                return
            self._char({"n": " ", "t": " ", "r": " ", "b": "", "f": ""}.get(ch, ch), out)
            return
        if ch == "\\":
            self._escape = True
        elif ch == '"':
            self._in_string = False
            if self._is_key:
                self._key = "".join(self._key_buf)
                self._expect_key = False
        else:
            self._char(" " if _CONTROL.match(ch) else ch, out)

    def _char(self, ch: str, out: list[str]) -> None:
        if self._is_key:
            self._key_buf.append(ch)
        elif self._emitting:
            out.append(ch)
