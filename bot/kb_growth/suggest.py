"""Suggestions that pre-fill a new case from a log: signatures, title, area, id, and the example text.

Signatures are derived from the root error lines the way an author would write them by hand: the stable
words stay literal, variable parts (numbers, hex, paths, IPs, UUIDs, quoted names with digits or
slashes, redaction marks) become small regexes. A suggestion is kept only if it
  - compiles and cannot match the empty string,
  - hits the source log (with the matcher's own line cleaning),
  - does not fire on any healthy start-up log;
ones that also match another case's examples go last (they are shown, with that warning, only if
nothing better exists).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.diagnosis.distill import distill
from bot.diagnosis.paste import Paste, redacted
from bot.diagnosis.redact import redact
from bot.kb_growth.lint import cleaned_lines, signature_fires
from bot.models import Distilled, LogLine, Match
from kb.schema import AREAS, Case

MAX_SIGNATURES = 3
MIN_LITERAL = 12  # characters of literal text a signature must keep to be a fingerprint
TARGET_LITERAL = 100  # stop adding pieces after this much literal text (re.search needs no more)
MAX_EXAMPLE_CHARS = 2800  # fits a Slack plain_text_input (3,000) with room for the source URL
MAX_EXAMPLE_LINES = 40

_VARIABLE = re.compile(
    r"""
     (?P<redacted>\[REDACTED:[a-z0-9-]+\])
    |(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)
    |(?P<url>\bhttps?://\S+)
    |(?P<path>(?:(?<=\s)|^|(?<=["'(=]))(?:[A-Za-z]:)?(?:[~.]{0,2}/[^\s"'():,]+)+)
    |(?P<ip>\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b)
    |(?P<hex>\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{10,}\b)
    |(?P<squoted>'[^'\s]*[/\d][^'\s]*')
    |(?P<dquoted>"[^"\s]*[/\d][^"\s]*")
    |(?P<num>(?<![A-Za-z_])\d+(?:\.\d+)*)
    """,
    re.X,
)
_GENERIC = {
    "redacted": r"\S+",
    "uuid": r"[0-9a-fA-F-]{36}",
    "url": r"\S+",
    "path": r"\S+",
    "ip": r"[\d.:]+",
    "hex": r"(?:0x)?[0-9a-fA-F]+",
    "squoted": r"'[^']*'",
    "dquoted": r'"[^"]*"',
    "num": r"\d+",
}
_SPECIAL = re.compile(r"([\\.^$*+?()\[\]{}|])")
_EXC_PREFIX = re.compile(r"^(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception|Warning|Fault|Interrupt)|RuntimeError|Error)\s*:\s*")
_SLUG_STOP = frozenset("a an the of to for in on at is are was be by with and or not no when while from".split())

# Area hints: words in the root error lines → area (the nearest existing cases vote too).
_AREA_WORDS: dict[str, tuple[str, ...]] = {
    "memory": ("out of memory", "oom", "kv cache", "cache blocks", "memory", "gpu_memory_utilization", "swap"),
    "cuda": ("cuda", "cudnn", "cublas", "nvml", "driver", "libcu", "triton", "nvidia"),
    "distributed": ("nccl", "gloo", "rank", "tensor parallel", "tensor_parallel", "ray", "world_size", "torch.distributed"),
    "install": ("modulenotfounderror", "importerror", "no module named", "pip", "glibc", "undefined symbol", "wheel"),
    "model": ("model", "tokenizer", "config.json", "huggingface", "safetensors", "architecture", "quantization"),
    "serving": ("http", "port", "request", "api", "openai", "address already in use", "uvicorn", "endpoint"),
    "hardware": ("xid", "compute capability", "ecc", "fell off the bus", "pcie", "sm_"),
    "performance": ("slow", "throughput", "latency", "preempt", "pending", "tokens/s"),
}


@dataclass(frozen=True)
class SignatureSuggestion:
    pattern: str
    line: str  # the root error line it came from
    overlaps: tuple[str, ...] = ()  # other case ids whose examples it also matches


def _escape(text: str) -> str:
    """re.escape for readable YAML: only the characters that mean something in a regex."""
    return _SPECIAL.sub(r"\\\1", text)


def generalise(line: str) -> str | None:
    """A regex for `line`: literal words kept, variable parts generalised; None if too little is literal."""
    pieces: list[tuple[bool, str]] = []  # (is_literal, regex text)
    pos = 0
    literal_chars = 0
    for m in _VARIABLE.finditer(line):
        if m.start() > pos:
            pieces.append((True, line[pos : m.start()]))
        kind = m.lastgroup or "num"
        pieces.append((False, r"[\d.]+" if kind == "num" and "." in m.group() else _GENERIC[kind]))
        pos = m.end()
    if pos < len(line):
        pieces.append((True, line[pos:]))
    out: list[tuple[bool, str]] = []
    for is_literal, text in pieces:
        if is_literal and literal_chars >= TARGET_LITERAL:
            break
        if is_literal:
            words = text
            if literal_chars + len(text) > TARGET_LITERAL + 40:  # cut a long tail at a word boundary
                cut = text.rfind(" ", 0, TARGET_LITERAL + 40 - literal_chars)
                words = text[: cut if cut > 0 else len(text)]
            literal_chars += len(words.strip())
            out.append((True, words))
            if words is not text:
                break
        else:
            out.append((False, text))
    while out and (not out[0][0] or not out[0][1].strip()):  # a fingerprint starts with words
        out.pop(0)
    while out and (not out[-1][0] or not out[-1][1].strip()):
        out.pop()
    if not out:
        return None
    first, last = out[0], out[-1]
    out[0] = (True, first[1].lstrip())
    out[-1] = (last[0], last[1].rstrip() if last[0] else last[1])
    literal = sum(len(t.strip()) for lit, t in out if lit)
    if literal < MIN_LITERAL:
        return None
    pattern = "".join(_escape(t) if lit else t for lit, t in out)
    pattern = re.sub(r"(?:\\ | ){2,}", " +", pattern)
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None
    if compiled.search(""):
        return None
    return pattern


def _probe_case(pattern: str) -> Case:
    """A throw-away case holding one pattern, so the KB's own scanner can test it (not validated: the
    pattern was compiled above)."""
    return Case.model_construct(id="suggestion", signatures=[pattern])  # type: ignore[call-arg]  # unvalidated probe: the scanner reads id and signatures only


def suggest_signatures(
    source_log: str,
    *,
    healthy: Sequence[tuple[str, Sequence[LogLine]]],
    others: Iterable[Case] = (),
    distilled: Distilled | None = None,
    limit: int = MAX_SIGNATURES,
) -> list[SignatureSuggestion]:
    distilled = distilled or distill(source_log)
    source_lines = distilled.cleaned
    roots = [r.text for r in distilled.root_errors] or [e.text for e in distilled.evidence if e.kind != "frame"][-3:]
    others = list(others)
    good: list[SignatureSuggestion] = []
    seen: set[str] = set()
    for root in _best_roots_first(roots):
        if "Traceback (most recent call last)" in root:
            continue
        pattern = generalise(root)
        if pattern is None or pattern in seen:
            continue
        seen.add(pattern)
        probe = _probe_case(pattern)
        if not signature_fires(probe, source_lines):
            continue
        if any(signature_fires(probe, lines) for _, lines in healthy):
            continue
        overlaps = tuple(
            o.id for o in others if any(signature_fires(probe, cleaned_lines(ex.log)) for ex in o.examples)
        )
        good.append(SignatureSuggestion(pattern, root, overlaps))
    good.sort(key=lambda s: (bool(s.overlaps), not _EXC_PREFIX.match(s.line)))  # stable: root order kept
    if any(_EXC_PREFIX.match(s.line) and not s.overlaps for s in good):
        # a wrapper line ("EngineCore hit an exception") would fire on every crash: only as a last resort
        good = [s for s in good if _EXC_PREFIX.match(s.line)]
    return good[:limit]


def _best_roots_first(roots: Sequence[str]) -> list[str]:
    """Exception lines ("ValueError: …") carry the cause; wrapper lines ("EngineCore hit an exception") don't."""
    return sorted(roots, key=lambda r: not _EXC_PREFIX.match(r))


def suggest_title(distilled: Distilled) -> str:
    """The first root error's message, without the exception class, cut at its first sentence."""
    roots = _best_roots_first([r.text for r in (distilled.root_errors or distilled.evidence)])
    roots = [r for r in roots if "Traceback (most recent call last)" not in r] or roots
    if not roots:
        return ""
    return title_from_line(roots[0])


def title_from_line(line: str) -> str:
    """A case title from one root error line: its message without the exception class, cut at its first
    sentence (a drafted case's title: bot/kb_growth/clusters.py)."""
    text = redact(line).strip()
    message = _EXC_PREFIX.sub("", text) or text
    message = re.sub(r"^\[Errno \d+\]\s*", "", message)
    message = re.split(r":\s*(?=['\"/\[(<]|\.{1,2}/|https?://)", message, maxsplit=1)[0]  # drop ": '/the/variable/part'"
    message = re.split(r"(?<=[a-z0-9\)])\.\s", message, maxsplit=1)[0].rstrip(". ")
    if len(message) > 110:
        cut = message.rfind(" ", 0, 110)
        message = message[: cut if cut > 40 else 110].rstrip(",;: ")
    if len(message) < 5:
        message = text[:110]
    return message[:1].upper() + message[1:]


def suggest_id(title: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9]+", title.lower()) if w not in _SLUG_STOP]
    slug = "-".join(words[:6])
    return slug or "new-case"


def suggest_area(distilled: Distilled, nearest: Sequence[Match] = ()) -> str:
    """Keyword votes from the root error lines plus the areas of the nearest known cases."""
    votes: defaultdict[str, float] = defaultdict(float)  # fractional votes (scores), 0.0 when absent
    text = " ".join(line.text for line in (distilled.root_errors or distilled.evidence)).lower()
    for area, words in _AREA_WORDS.items():
        votes[area] += sum(1.0 for w in words if w in text)
    for rank, match in enumerate(nearest[:3]):
        if match.area in AREAS:
            votes[match.area] += (2.0 if rank == 0 else 1.0) * match.score
    if not votes or max(votes.values()) <= 0:
        return "serving"
    best = max(votes.values())
    return next(a for a in AREAS if votes[a] == best)


def example_text(raw: str | Paste, distilled: Distilled | None = None, limit: int = MAX_EXAMPLE_CHARS) -> str:
    """The verbatim (redacted) lines of the paste that distillation kept, trimmed to fit a form field:
    root errors first, then the context lines closest to them."""
    raw = redacted(raw).text  # the whole paste at once: a PEM block spans lines
    distilled = distilled or distill(raw)
    lines = raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    chosen = [e for e in distilled.evidence if 0 < e.line_no <= len(lines)][:MAX_EXAMPLE_LINES]
    if not chosen:
        return "\n".join(line for line in lines if line.strip())[-limit:]
    roots = {r.line_no for r in distilled.root_errors}

    def text_of(no: int) -> str:
        line = lines[no - 1].rstrip()
        return line if len(line) <= 400 else line[:400] + " …"

    keep = [e.line_no for e in chosen]
    while keep and sum(len(text_of(n)) + 1 for n in keep) > limit:
        droppable = [n for n in keep if n not in roots] or keep
        keep.remove(droppable[0])
    return "\n".join(text_of(n) for n in keep)
