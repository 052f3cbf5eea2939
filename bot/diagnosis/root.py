"""The root line of a log and the component it blames (issue 25): what a person reads first.

The root line is the earliest line that states the error to fix: the exception under wrapper lines
("Engine core initialization failed. See root cause above", "WorkerProc failed to start", EngineDeadError, a
bare "Killed" only when nothing better exists), or an INFO/WARNING line where that is where the cause is
stated ("# GPU blocks: 0", a negative KV cache reservation, Ray's "/dev/shm has only … bytes"). Its component
comes from the matched case when the verdict is `match`, else from deterministic rules over the line
(kb/triage/components.yaml). A paste that states no cause (cut before its exception, or only warnings) has no
root; `missing_reason` says why. Pure functions over bot/models values; the pipeline sets Diagnosis.root.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from bot.diagnosis.frames import cut_frames, read_frames
from bot.diagnosis.versions import known_versions
from bot.models import Component, Distilled, LogFacts, LogLine, Match, RaisedAt, Root, Verdict
from kb.triage import Triage, default_component_map, default_triage

# What kind of line the root is, and so why it was chosen (the answer says it).
RootKind = Literal["case", "exception", "notice", "error", "wrapper", "fact", "source"]
# Why a paste has no root line.
MissingReason = Literal["truncated", "warnings_only", "no_error", "wrappers_only"]

# a traceback frame, its caret line, or the source line it quotes (`raise X(` is code, not the error it raises)
_FRAME_TEXT = re.compile(r'File "[^"]+", line \d+|^\s*\^[\^~\s]*$|^\s*raise\s+[\w.]+\s*(?:\(|$)')
_SKIP = re.compile(
    r"Traceback \(most recent call last\)|^The above exception was the direct cause|"
    r"^During handling of the above exception|\[[\w.]+:\d+\]\s*$|^\s*$|CUDA kernel errors might be asynchronously|"
    r"CUDA_LAUNCH_BLOCKING|TORCH_USE_CUDA_DSA|For debugging consider passing"
)
# An exception named with its message anywhere in the line ("… ERROR … ValueError: x", "OSError: [Errno 116] …")
_EXCEPTION = re.compile(
    r"(?:^|[^\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Fault)\)?(?::\s*\S|\s*$|\(['\"])|"
    r"(?:失败|错误|报错|异常)\s*[:：]|^\s*Value error, |\bAssertion\b.*\bfailed\b|^\s*Assertion [`'(]|\bFATAL: |"
    r"\brequires [\w.-]+\s*[<>=!~]=?\s*[\w.*]+, but you have\b|"
    r"CUDA [Ee]rror|CUBLAS_STATUS|cudaError|NCCL WARN|NCCL error|nccl\w*Error|\bXid\b|Bus error|Segmentation fault|"
    r"╰─▶ |"  # uv's resolver states why under its "× No solution found" header
    r"Fatal Python error|\[Errno \d+\]|out of memory|Illegal instruction|undefined symbol|"
    r"cannot open shared object file|^error: "
)
_KILLED = re.compile(r"^\s*(?:\S+\s+)?Killed\s*$")
# INFO lines that show a failure only from the outside: an access log's 4xx/5xx reply, a client still waiting for its
# server. The root only when no other line states anything.
# an exception line inside an indented traceback (the distiller reads the whole indented block as frames)
_INDENTED_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception): \S")
# pydantic v1's message line under its "N validation error for X" header: "  Did not find … (type=value_error)"
_PYDANTIC_MESSAGE = re.compile(r"\(type=[\w.]+(?:; [^()]*)?\)\s*$")
_SERVED = re.compile(r'HTTP/[\d.]+"? [23]\d\d\b')  # an access log line of a request that was answered
_OUTSIDE = re.compile(r'HTTP/[\d.]+"? [45]\d\d\b|\bServer is not up yet\b|\bnot (?:up|ready) yet\W+Retrying\b')
_QUIET = ("info", "debug")
# Dynamic parts left out of a search phrase: paths, URLs, addresses, hex, numbers, quoted values holding them.
_SEARCH_DROP = (
    re.compile(r"https?://\S+"),
    re.compile(r"'[^']*[/\\][^']*'|\"[^\"]*[/\\][^\"]*\""),
    re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+~-]+){2,}[\\/]?"),
    re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{8,}\b"),
    re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"),
    re.compile(r"(?<![A-Za-z])[-+]?\d[\d.,_]*(?:\s?(?:GiB|MiB|KiB|GB|MB|KB|B|bytes|%|ms|s))?\b"),
)
_SEARCH_KEEP_ERRNO = re.compile(r"\[Errno (\d+)\]")
SEARCH_MAX_CHARS = 120


@dataclass(frozen=True)
class RootReading:
    """The root (or None), what kind of line it is, why none was found, and other independent failures."""

    root: Root | None
    kind: RootKind | None = None
    missing: MissingReason | None = None
    others: tuple[LogLine, ...] = ()  # later error lines of another component (a second failure)


def _alternation(patterns: Sequence[str]) -> re.Pattern[str]:
    """One regex matching any of the patterns (none: matches nothing)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!)")


_CMAP = default_component_map()
_RULES = [(r.component, re.compile(r.pattern), r.broad) for r in _CMAP.rules]
_WRAPPERS, _NOTICES, _STACK_NAMES = (_alternation(_CMAP.wrappers), _alternation(_CMAP.cause_notices),
                                     _alternation(_CMAP.stack_names))
_LIBRARIES = frozenset(_CMAP.libraries)
_RAISED_IN = tuple(_CMAP.raised_in.items())


def _raised_in(file: str) -> Component | None:
    return next((component for glob, component in _RAISED_IN if fnmatchcase(file, glob)), None)


# components a generic line gets that, off Linux + NVIDIA, are more likely the platform's doing
_PLATFORM_GENERIC: frozenset[Component] = frozenset(
    {"other", "cuda-driver-stack", "python-packages", "engine-config", "gpu-hardware"})


def classify(text: str) -> Component:
    """The component a root line blames: the first rule of kb/triage/components.yaml that matches, else other."""
    return _rule_for(text)[0]


def _rule_for(text: str) -> tuple[Component, bool]:
    """The first matching rule's component, and whether only a broad keyword rule (or none) named it."""
    for component, pattern, broad in _RULES:
        if pattern.search(text):
            return component, broad
    return "other", True


def case_component(case_id: str, area: str) -> Component:
    """The component of a KB case (components.yaml: per-case exceptions, then its area); other if unmapped."""
    found = default_component_map().for_case(case_id, area)
    return found if found is not None else "other"


def triage(component: Component) -> Triage:
    return default_triage()[component]


def _tier(line: LogLine) -> tuple[int, RootKind] | None:
    """Rank of a line as a root candidate (lower is better), or None when it states nothing to fix."""
    text = line.text.strip()
    if (line.kind == "frame" and not _INDENTED_EXCEPTION.match(text)) or _FRAME_TEXT.search(line.text) \
            or _SKIP.search(text) or _SERVED.search(text):
        return None
    if _PYDANTIC_MESSAGE.search(text):
        return 2, "exception"
    if _NOTICES.search(text):
        return 1, "notice"
    if line.level in _QUIET:
        return (8, "error") if _OUTSIDE.search(text) else None
    if _KILLED.match(text):
        return 5, "wrapper"
    if _WRAPPERS.search(text):
        return 4, "wrapper"
    if line.level == "warning":
        # a client's retry warnings ("… (ConnectError): All connection attempts failed") are where some logs
        # state their only error: the root when no error line states one
        return (7, "exception") if _EXCEPTION.search(text) or line.kind == "root" else None
    if _EXCEPTION.search(text):
        return 2, "exception"
    if line.kind == "root":
        return 3, "error"
    if line.level == "" and classify(text) != "other":
        # a line without a logger prefix that names a failure in words the component rules know (the asker's
        # title, a bare message): the root only when nothing else states one
        return 6, "error"
    return None


def _candidates(distilled: Distilled) -> list[tuple[int, RootKind, LogLine]]:
    by_line: dict[int, LogLine] = {}
    for line in (*distilled.cleaned, *distilled.root_errors):
        by_line.setdefault(line.line_no, line)
    out = []
    for line in sorted(by_line.values(), key=lambda ln: ln.line_no):
        ranked = _tier(line)
        if ranked is not None:
            out.append((ranked[0], ranked[1], line))
    return out


def _fact_root(facts: LogFacts | None) -> LogLine | None:
    """A zero or negative KV cache stated by the memory profile: the line that states the cause."""
    if facts is None:
        return None
    for name, value in (("gpu_blocks", facts.gpu_blocks), ("kv_cache_gib", facts.kv_cache_gib),
                        ("kv_cache_tokens", facts.kv_cache_tokens)):
        if value is not None and value <= 0 and name in facts.sources:
            line_no = facts.sources[name]
            return LogLine(line_no, facts.quotes.get(line_no, ""), "context", "info")
    return None


def _case_line(best: Match, distilled: Distilled, facts: LogFacts | None) -> LogLine | None:
    """The line the matched case rests on: its earliest fingerprint on a message line, or its fact line."""
    by_line = {ln.line_no: ln for ln in (*distilled.cleaned, *distilled.root_errors)}
    hits = sorted(
        (e for e in best.evidence if e.kind == "signature" and e.line_no in by_line
         and by_line[e.line_no].kind != "frame" and not _FRAME_TEXT.search(e.text)),
        key=lambda e: e.line_no,
    )
    if hits:
        return by_line[hits[0].line_no]
    facts_ev = [e for e in best.evidence if e.kind == "fact" and e.line_no > 0]
    if facts_ev:
        quote = facts.quotes.get(facts_ev[0].line_no, facts_ev[0].text) if facts else facts_ev[0].text
        return LogLine(facts_ev[0].line_no, quote or facts_ev[0].text, "context")
    return None


def read_root(
    distilled: Distilled, facts: LogFacts | None, verdict: Verdict, matches: Sequence[Match]
) -> RootReading:
    """The root line of a log, its component, and why (see the module doc)."""
    best = matches[0] if matches else None
    candidates = _candidates(distilled)
    if verdict == "match" and best is not None:
        line = _case_line(best, distilled, facts)
        if line is not None:
            line = _message_below(distilled, _block_head(candidates, line))
            component = case_component(best.case_id, best.area)
            return RootReading(Root(line.line_no, line.text.strip(), component, raised_at(distilled, line)), "case",
                               others=_others(candidates, line, component))
    fact_line = _fact_root(facts)
    chosen: tuple[int, RootKind, LogLine] | None = None
    if candidates:
        chosen = min(candidates, key=lambda c: (c[0], c[2].line_no))
    if fact_line is not None and (chosen is None or chosen[0] >= 3):
        chosen = (1, "fact", fact_line)
    if chosen is None or (chosen[0] >= 4 and (distilled.truncated or cut_frames(distilled))):
        raising = _raise_at_end(distilled)
        if raising is not None:  # cut right after the source line that raises it: its message is in that line
            component = case_component(best.case_id, best.area) if verdict == "match" and best is not None \
                else classify(raising.text)
            return RootReading(Root(raising.line_no, raising.text.strip(), component, raised_at(distilled, raising)),
                               "source", others=())
        return RootReading(None, missing=_missing(distilled, candidates))
    tier, kind, line = chosen
    line = _first_statement(candidates, line) if tier == 2 else line
    line = _message_below(distilled, line)
    component, broad = _rule_for(line.text)
    raised = raised_at(distilled, line)
    if component in _PLATFORM_GENERIC and facts is not None and facts.platform is not None:
        component = "platform"
    elif component == "other" and best is not None and any(e.line_no == line.line_no for e in best.evidence
                                                         if e.kind == "signature"):
        component = case_component(best.case_id, best.area)  # the candidate's fingerprint is on this very line
    elif component == "other" and raised is not None and _raised_in(raised.file) is not None:
        component = _raised_in(raised.file) or component  # no rule names it: the library that raised it does
    elif broad and raised is not None and raised.app and not _STACK_NAMES.search(line.text):
        component = "other"  # the application's own error: a common word in it (config, backend) does not blame us
    return RootReading(Root(line.line_no, line.text.strip(), component, raised), kind,
                       others=_others(candidates, line, component))


RAISE_GAP = 6  # lines a frame may sit above its exception line (code line, carets, `raise X(` and its arguments)


def raised_at(distilled: Distilled, root: LogLine) -> RaisedAt | None:
    """The innermost frame of the traceback that ends in the root line: which file and function raised it.
    None when no frame sits right above the root line (no traceback, or the exception printed on its own)."""
    lines = distilled.cleaned or distilled.evidence
    above = [ln for ln in lines if root.line_no - RAISE_GAP <= ln.line_no < root.line_no]
    frames = [f for f in read_frames(above) if not f.path.startswith("<")]  # generated code (<string>) says nothing
    if not frames:
        return None
    last = frames[-1]
    between = [ln for ln in above if ln.line_no > last.line_no + 1 and ln.text.strip()]
    if any(_EXCEPTION.search(ln.text) and not _FRAME_TEXT.search(ln.text) and not ln.text.strip().startswith("raise")
           for ln in between):
        return None  # another exception line stands between: the frame belongs to that one
    file, app = frame_file(last.path)
    return RaisedAt(file, last.file_line, last.function, last.line_no, app)


_PYTHON_LIB = re.compile(r"^python\d(?:\.\d+)?$")


def frame_file(path: str) -> tuple[str, bool]:
    """A frame's file as shown (from its package down; the file's name alone for the application's own code, so no
    user path is shown) and whether it is the application's code (in none of components.yaml's `libraries`)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    start = None
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") or _PYTHON_LIB.match(part):
            start = i + 1  # below the install root, or the standard library's own directory
    if start is None and len(parts) >= 2 and parts[-2].lower() == "lib":
        start = len(parts) - 1  # a standard-library module straight under lib (Windows: ...\\Lib\\subprocess.py)
    if start is None:  # a source checkout (/workspace/vllm/vllm/config.py): from the last library directory
        start = next((i for i in range(len(parts) - 2, -1, -1) if parts[i] in _LIBRARIES), None)
    if start is None or start >= len(parts):
        return (parts[-1] if parts else path), True
    package = parts[start].removesuffix(".py")
    return "/".join(parts[start:]), package not in _LIBRARIES


# `raise ValueError("No available memory for the cache blocks. "`: the code line states its message in a literal
_RAISE_LITERAL = re.compile(r"""^\s*raise\s+[\w.]*(?:Error|Exception)\w*\(\s*(?:f|r|rf|fr)?["'][^"']{12,}""")


def _raise_at_end(distilled: Distilled) -> LogLine | None:
    """The paste's last line, when it is the source line that raises an error with a literal message."""
    lines = [ln for ln in (distilled.cleaned or distilled.evidence) if ln.text.strip()]
    if not lines:
        return None
    last = max(lines, key=lambda ln: ln.line_no)
    return last if _RAISE_LITERAL.search(last.text) else None


STATEMENT_MIN_CHARS = 15


def _first_statement(candidates: list[tuple[int, RootKind, LogLine]], line: LogLine) -> LogLine:
    """An earlier error line that states the same message the exception repeats ("ERROR … Unknown RoPE scaling type
    ntk" logged above the traceback that ends in "ValueError: Unknown RoPE scaling type ntk"): the first statement."""
    text = line.text.strip()
    for tier, _, earlier in candidates:
        said = earlier.text.strip()
        if earlier.line_no >= line.line_no:
            break
        if tier <= 3 and len(said) >= STATEMENT_MIN_CHARS and said != text and text.endswith(said):
            return earlier
    return line


def _block_head(candidates: list[tuple[int, RootKind, LogLine]], line: LogLine) -> LogLine:
    """The case's fingerprint line, or the exception line right above it that states the same error first
    ("DistBackendError: NCCL error … unhandled cuda error" above "ncclUnhandledCudaError: …")."""
    above = [c for c in candidates if c[0] == 2 and 0 < line.line_no - c[2].line_no <= 2]
    return above[0][2] if above else line


_BARE_EXCEPTION = re.compile(r"(?:^|\s)(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception):\s*$")


def _message_below(distilled: Distilled, line: LogLine) -> LogLine:
    """`RuntimeError:` with its message on the next line (pip's build output, indented tracebacks): the message
    line states the error."""
    if not _BARE_EXCEPTION.search(line.text):
        return line
    by_line = {ln.line_no: ln for ln in distilled.cleaned}
    below = by_line.get(line.line_no + 1)
    if below is None or not below.text.strip() or _FRAME_TEXT.search(below.text) or _SKIP.search(below.text.strip()):
        return line
    return below


def _others(
    candidates: list[tuple[int, RootKind, LogLine]], root: LogLine, component: Component
) -> tuple[LogLine, ...]:
    """Later exception lines that blame another component: a second, unrelated failure in the same paste."""
    out = []
    for tier, _, line in candidates:
        if tier == 2 and line.line_no > root.line_no and classify(line.text) not in (component, "other"):
            out.append(line)
    return tuple(out[:2])


def _missing(distilled: Distilled, candidates: list[tuple[int, RootKind, LogLine]]) -> MissingReason:
    if distilled.truncated or (not candidates and cut_frames(distilled)):
        return "truncated"  # flagged by the distiller, or frames that no exception line closes
    if candidates:
        return "wrappers_only"
    if distilled.quiet_only or any(ln.level == "warning" for ln in (*distilled.cleaned, *distilled.evidence)):
        return "warnings_only"
    return "no_error"


def find_root(
    distilled: Distilled, facts: LogFacts | None, verdict: Verdict, matches: Sequence[Match]
) -> Root | None:
    return read_root(distilled, facts, verdict, matches).root


_ASKED = re.compile(
    r"[?？]|^\s*(?:how|why|what|when|where|which|who|can|could|does|do|is|are|should|would|any)\b|"
    r"怎么|怎样|为什么|为何|如何|请问|能否|是否|吗\s*$|呢\s*$|求助",
    re.IGNORECASE,
)


def pasted_line_root(text: str, distilled: Distilled, facts: LogFacts | None) -> Root | None:
    """The root of a short paste answered as a question: a pasted error line ("Bus error (core dumped)", an
    issue title naming a failure) has one; text phrased as a question has none."""
    if _ASKED.search(text):
        return None
    reading = read_root(distilled, facts, "unknown", ())
    if reading.kind in ("exception", "notice", "error", "fact"):
        return reading.root
    lines = [ln for ln in distilled.cleaned if ln.text.strip()]
    if len(lines) == 1 and _MESSAGE.search(lines[0].text):  # one pasted message in words the rules do not know
        line = lines[0]
        return Root(line.line_no, line.text.strip(), classify(line.text), None)
    return None


# A pasted line that reads as an error message (not a description of a problem: "vllm serve crashes on startup")
_MESSAGE = re.compile(r"(?i)\b(?:must (?:be|not)|invalid|not (?:supported|found|allowed)|unsupported|cannot|can't|"
                      r"unable to|failed|unknown|expected .+ got|requires?)\b")


def established(verdict: Verdict, matches: Sequence[Match], root: Root | None) -> bool:
    """Whether the log establishes the top case: a `match`, or an `uncertain` whose top case rests on a
    fingerprint or a proven fact rule that blames the root line's component. Otherwise candidates are only
    "possibly related" and their cause and fix are not shown as if they applied."""
    if not matches or verdict == "unknown":
        return False
    if verdict == "match":
        return True
    best = matches[0]
    if not (best.signature_hit or "fact_rule" in best.scores):
        return False
    if root is None:
        return True
    on_root = any(e.line_no == root.line for e in best.evidence)
    return on_root or case_component(best.case_id, best.area) == root.component


def cases_affecting(cases: Sequence[Any], facts: LogFacts | None, component: Component | None) -> list[str]:
    """Ids of the KB cases of `component` whose `affects` range holds a version this log states."""
    known = known_versions(facts)
    if not known:
        return []
    out = []
    for case in cases:
        affects = getattr(case, "affects", None) or {}
        if component is not None and case_component(case.id, case.area) != component:
            continue
        for package, spec in affects.items():
            version = known.get(package)
            if version is None:
                continue
            try:
                if SpecifierSet(spec).contains(version.version, prereleases=True):
                    out.append(case.id)
                    break
            except InvalidSpecifier:
                continue
    return out


def search_phrase(text: str) -> str:
    """The stable part of a root line for a web or issue search: no paths, numbers, addresses or hex."""
    errno = _SEARCH_KEEP_ERRNO.search(text)
    out = _SEARCH_KEEP_ERRNO.sub(" ", text)
    for pattern in _SEARCH_DROP:
        out = pattern.sub(" ", out)
    out = re.sub(r"[:,;]\s*(?=[:,;]|$)", "", out)
    out = re.sub(r"\(\s*\)|\[\s*\]|''|\"\"", " ", out)
    out = re.sub(r"\s+", " ", out).strip(" :,;-")
    if errno:
        head, sep, tail = out.partition(": ")
        out = f"{head}: [Errno {errno.group(1)}] {tail}".strip() if sep else f"[Errno {errno.group(1)}] {out}"
    if len(out) > SEARCH_MAX_CHARS:
        out = out[:SEARCH_MAX_CHARS].rsplit(" ", 1)[0]
    return out


__all__ = [
    "MissingReason", "RootKind", "RootReading", "case_component", "cases_affecting", "classify", "established",
    "find_root", "pasted_line_root", "read_root",
    "search_phrase", "triage",
]
