"""The entry point of every user text: bytes or text → a `Paste` (decoded, checked, redacted once).

A `Paste` is the only form in which a user's log travels downstream: distillation, matching, the LLM
prompt, Slack, the KB-growth store and log records read `paste.text`, which is already redacted. The raw
input is not kept anywhere: `Paste` can only be made here (`decode_input`, `redacted`), and both run the
whole text through `bot.diagnosis.redact` first, as one multi-line text (PEM blocks span lines). Redaction keeps
line breaks, so line numbers still point into what the user pasted.

Decoding: UTF-8 (with or without BOM); UTF-16/32 by their BOM (PowerShell's `>` writes UTF-16 LE);
GB18030 when UTF-8 fails; otherwise invalid bytes become U+FFFD. Lone surrogates in text (from JSON
`"\\udcff"`) become U+FFFD too: tokenizers and the Slack API reject them. ANSI colour sequences are
stripped before the binary test, so a densely coloured log is not refused as binary.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Final

from bot.diagnosis.redact import redact_with_count
from bot.errors import BinaryInput, EmptyInput, InputTooLarge

_ENTRY: Final = object()  # only this module holds it: a Paste made anywhere else fails at construction
_HEAD = 8192  # bytes looked at by the binary test
_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# the same sequences in decoded text; none spans a line (a stray ESC ] must not swallow line breaks)
_ANSI_TEXT = re.compile(r"\x1b\[[0-9;?]{0,64}[ -/]{0,8}[@-~]|\x1b\][^\x07\x1b\r\n]{0,512}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_C1_CSI = re.compile(r"\x9b[0-9;?]{0,64}[ -/]{0,8}[@-~]")
_C1 = re.compile(r"[\x80-\x9f]")
# (BOM, codec) longest first: the UTF-32 LE BOM begins with the UTF-16 LE one
_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class Paste:
    """A user's log, decoded and redacted. `text` never holds a secret the redactor knows."""

    text: str
    notes: tuple[str, ...] = ()  # e.g. "decoded as UTF-16 (byte order mark)"
    secrets: int = 0  # how many secrets were replaced
    size: int = 0  # bytes (or characters) the user sent
    _made_by: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._made_by is not _ENTRY:
            raise TypeError("a Paste is made only by bot.diagnosis.paste.decode_input() or "
                            "bot.diagnosis.paste.redacted()")

    def __str__(self) -> str:
        return self.text


def redacted(text: str | Paste) -> Paste:
    """Text that is already decoded (a KB example, a form field, stored evidence) → Paste; a Paste is
    returned as it is. No size or binary checks: use decode_input for what a user sends."""
    if isinstance(text, Paste):
        return text
    clean, notes = _valid_text(_strip_controls(text))
    safe, count = redact_with_count(clean)
    return Paste(safe, notes, count, len(text), _made_by=_ENTRY)


def decode_input(data: str | bytes | Paste, max_bytes: int) -> Paste:
    """Bytes or text from a user → Paste; refuses empty, binary and oversized input with a specific
    message (bot.errors.UserInputError subclasses). Never raises anything else."""
    if isinstance(data, Paste):
        return data
    size = _size(data, max_bytes)
    if size > max_bytes:
        raise InputTooLarge(
            f"The log is {size / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB. "
            "Paste the last part of the log: the error is usually at the end."
        )
    notes: list[str] = []
    if isinstance(data, bytes):
        text = _decode_bytes(data, notes)
    else:
        text = data
        if "\x00" in text[:_HEAD]:
            rest = text.replace("\x00", "")
            if not rest.strip() or _looks_binary(rest[:_HEAD].encode("utf-8", "surrogatepass")):
                raise BinaryInput("This looks like binary data, not a text log. Paste the text of the error output.")
            notes.append("NUL bytes were removed (log rotation with copytruncate pads the file with them)")
    if text.startswith("\ufeff"):
        text = text[1:]
    text, more = _valid_text(_strip_controls(text))
    notes += more
    if not text.strip():
        raise EmptyInput("The log is empty. Paste the error output of vLLM (the last 50-100 lines are usually enough).")
    safe, count = redact_with_count(text)
    return Paste(safe, tuple(notes), count, size, _made_by=_ENTRY)


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def too_large_message(what: str, max_bytes: int) -> str:
    """One line for input over the limit (read as far as limit + 1 bytes: its full size is not known)."""
    return (
        f"{what} is larger than the input limit of {human_bytes(max_bytes)} ({max_bytes} bytes, "
        "VLLM_DOCTOR_MAX_INPUT_BYTES). Paste the last part of the log: the error is usually at the end."
    )


def read_limited(stream: BinaryIO, max_bytes: int, what: str) -> bytes:
    """At most `max_bytes` from a file or stdin; more is refused after reading only `max_bytes` + 1, so
    /dev/zero or an endless pipe costs one limit's worth of memory, never more."""
    data = bytearray()
    while len(data) <= max_bytes:
        chunk = stream.read(max_bytes + 1 - len(data))  # a pipe may return less than asked
        if not chunk:
            break
        data += chunk
    if len(data) > max_bytes:
        raise InputTooLarge(too_large_message(what, max_bytes))
    return bytes(data)


def _size(data: str | bytes, max_bytes: int) -> int:
    if isinstance(data, bytes) or len(data) <= max_bytes // 4:  # ≤ 4 bytes per character: surely small enough
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


def decode_by_bom(data: bytes) -> tuple[str, str] | None:
    """(text, codec) when `data` starts with a Unicode byte order mark, else None."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace"), codec
    return None


def _decode_bytes(data: bytes, notes: list[str]) -> str:
    by_bom = decode_by_bom(data)
    if by_bom is not None:
        text, codec = by_bom
        if codec != "utf-8":
            notes.append(f"decoded as {codec.upper()} (byte order mark)")
        return text
    if _looks_binary(data[:_HEAD]):
        padded = text_behind_nul_padding(data)
        if padded is None:
            raise BinaryInput(
                "This looks like a binary file, not a text log. Paste the text of the error output "
                "(or attach the .log/.txt file)."
            )
        notes.append("NUL bytes were removed (log rotation with copytruncate pads the file with them)")
        return padded
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("gb18030")
        notes.append("decoded as GB18030 (not UTF-8)")
        return text
    except UnicodeDecodeError:
        notes.append("invalid UTF-8 bytes were replaced with U+FFFD")
        return data.decode("utf-8", errors="replace")


def _looks_binary(head: bytes) -> bool:
    if b"\x1b" in head:  # colour codes are text, not binary
        head = _ANSI_BYTES.sub(b"", head)
    return b"\x00" in head or bool(head) and sum(b < 9 or 13 < b < 32 for b in head) / len(head) > 0.1


def text_behind_nul_padding(data: bytes) -> str | None:
    """A text log behind NUL bytes (copytruncate rotation leaves a run of them where the old content was):
    the text without them, when the rest is valid UTF-8 text; None for binary data."""
    rest = data.replace(b"\x00", b"")
    if not rest.strip() or _looks_binary(rest[:_HEAD]):
        return None
    try:
        return rest.decode("utf-8")
    except UnicodeDecodeError:  # images, archives, executables: their other bytes are not UTF-8
        return None


def _strip_controls(text: str) -> str:
    """Terminal control sequences out of the text, before redaction: ANSI colour (a code inside a token
    would hide it from the redactor and the token would be re-joined downstream), C1 controls
    (U+0080-U+009F: U+009B is a CSI that terminals obey) and NUL padding."""
    if "\x1b" in text:
        text = _ANSI_TEXT.sub("", text)
    if not text.isascii() and _C1.search(text):
        text = _C1.sub("", _C1_CSI.sub("", text))
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text


def _valid_text(text: str) -> tuple[str, tuple[str, ...]]:
    """Replace lone surrogates (not encodable, rejected by tokenizers and JSON consumers) with U+FFFD."""
    if text.isascii():
        return text, ()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text), ("lone surrogate characters were replaced with U+FFFD",)
    return text, ()
