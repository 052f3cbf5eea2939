"""Raw paste → the lines that matter (Distilled).

One linear pass over the lines. A cheap keyword filter skips INFO noise; tracebacks are followed with a
small state machine so the exception line and its last frames survive; lines repeated across ranks or
workers collapse to their first occurrence. Line numbers always refer to the original paste.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from itertools import islice

from bot.diagnosis.paste import Paste, decode_input, redacted  # noqa: F401 - decode_input: the entry, re-exported
from bot.models import Distilled, LogLevel, LogLine, WrappedLine
from indexer.literals import for_lines
from indexer.text import BOILERPLATE_RE, clean_line, mask, strip_ansi

MAX_EVIDENCE = 40
MAX_ROOTS = 12
MAX_CANDIDATES = 3000  # cleaned lines kept for signature scanning
FRAMES_PER_TRACEBACK = 3
MAX_TRACEBACK_LINES = 400
CONTEXT_WINDOW = 5  # lines before a root error kept as its context

# Fast pre-filter: a line is looked at only if it contains one of these (lower-case) words. One
# Aho-Corasick pass over the lower-cased paste finds them all (indexer/literals.py), which is what keeps a
# 10 MB paste well under a second.
_KEYWORDS = (
    "error", "exception", "traceback", "warn", "fail", "fatal", "killed", "refused", "denied", "timeout",
    "timed out", "not found", "no such", "cannot", "can't", "unable", "invalid", "mismatch", "unsupported",
    "not supported", "only supported", "out of memory", "oom", "nccl", "cuda", "preempt", "pending:", "xid",
    "bus error", "segmentation", "core dumped", "too old", "exceed", "larger than", "insufficient",
    "no module", "undefined symbol", "not available", "does not", "must be", "abort", "panic", "errno",
    "gated", "unauthori", "forbidden", "401", "403", "404", "address already in use", "no space left",
    "shared memory", "trust_remote_code", "chat template", "deprecat", "slow", "hang", "stuck",
    "socket", "interface", "fallen off", "nvrm", "last error", "not responding", "overflow", "illegal",
    "不", "错", "失败", "异常",
)
_FRAME_KEYWORDS = ('file "',)  # traceback frames, also those of a paste that starts inside a traceback
_TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Failed|Fault|Warning)\b(?::|$)"
)
_ROOT_MARKERS = re.compile(
    r"CUDA error|CUBLAS_STATUS|cudaError|NCCL WARN|NCCL error|nccl\w*Error|\bXid\b|Bus error|"
    r"Segmentation fault|core dumped|Fatal Python error|\[Errno \d+\]|out of memory|"
    r"^(?:RuntimeError|ValueError|AssertionError|OSError|ImportError|ModuleNotFoundError|TypeError|KeyError)\b|"
    r"^[\w.]*(?:Error|Exception): |^Killed$|^E\d{4} |^error: |^ERROR: "
)
_LEVEL_ERROR = re.compile(r"^\S*\s*(?:ERROR|CRITICAL)\b")
_CHAINED = re.compile(r"^(?:The above exception was the direct cause|During handling of the above exception)")
_ERROR_WORD = re.compile(r"(?i)\b(?:error|errors|failed|failure|fatal|refused|denied|not found|unable to)\b")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_QUIET = ("info", "debug", "warning")
# "`torch_dtype` is deprecated! Use `dtype` instead!": a deprecation notice is a warning with or without a prefix
_DEPRECATION = re.compile(r"\bis deprecated\b|\bhas been deprecated\b|^\[DEPRECATED\]")
_PY_WARNING = re.compile(r"^(?:\S+:\d+: [A-Z]\w*Warning: |warnings\.warn\(|\[W\d{3,4} )")


# IPython / Jupyter print tracebacks in their own layout ("ValueError   Traceback (most recent call last)",
# "Cell In[1], line 4", "File ~/…/vllm/utils.py:1022, in inner(*args)", "----> 4 llm = LLM(…)"). They are
# rewritten line for line into Python's layout, so one traceback grammar serves both (line numbers unchanged).
_TRACEBACK_HEADER = "Traceback (most recent call last)"
_IPY_HEADER_HEAD = re.compile(r"[A-Za-z_][\w.]*\s{2,}")  # what precedes the header on IPython's header line
_CELL_FRAME = r'  File "<cell In[\1]>", line \2, in <module>'
_IPY_REWRITES = (
    # the class name stays: a paste cut inside the traceback has nothing else to name the failure
    (re.compile(r"^([A-Za-z_][\w.]*)\s{2,}(Traceback \(most recent call last\))\s*$"), r"\1: \2:"),
    (re.compile(r"^Cell In\[(\d+)\], line (\d+)\s*$"), _CELL_FRAME),
    (re.compile(r"^Input In \[(\d+)\], in <cell line: (\d+)>\(\)\s*$"), _CELL_FRAME),
    (re.compile(r"^File (\S.*?):(\d+), in ([\w.<>]+).*$"), r'  File "\1", line \2, in \3'),
    # the line that ran, without IPython's arrow and line number: the code line Python prints under a frame
    (re.compile(r"^-*> ?\d+ +"), r"    "),
)
_IPY_CONTEXT = re.compile(r"^ +\d+ ")
_IPY_LINE_STARTS = ("Cell In[", "Input In [", "File ", "-")


def _is_ipython(text: str) -> bool:
    """Linear: literal searches, and a look at the line of each traceback header."""
    if "Cell In[" in text or "Input In [" in text:
        return True
    start = 0
    while (at := text.find(_TRACEBACK_HEADER, start)) != -1:
        if _IPY_HEADER_HEAD.fullmatch(text, text.rfind("\n", 0, at) + 1, at):
            return True
        start = at + 1
    return False


def _ipython_as_python(text: str) -> str:
    if not _is_ipython(text):
        return text
    lines = text.split("\n")
    for n, line in enumerate(lines):
        if _IPY_CONTEXT.match(line):
            lines[n] = ""  # a numbered line around the one that ran: context Python does not print (line count kept)
            continue
        if line.startswith(_IPY_LINE_STARTS) or _TRACEBACK_HEADER in line:
            for pattern, replacement in _IPY_REWRITES:
                new, done = pattern.subn(replacement, line, count=1)
                if done:
                    lines[n] = new
                    break
    return "\n".join(lines)


def _level(raw: str, stripped: str) -> LogLevel:
    """The logger level named by the prefix that clean_line removed ("" when there is none)."""
    i = raw.find(stripped[:40])
    prefix = raw[:i] if i > 0 else ""
    if stripped.startswith("NCCL INFO") or "] NCCL INFO " in raw[:120]:  # NCCL_DEBUG=INFO chatter
        return "info"
    if _PY_WARNING.search(stripped):  # Python's warnings module and c10's "[W…]" lines: warnings, whatever the prefix
        return "warning"
    if _DEPRECATION.search(stripped) and not _ERROR_WORD.search(stripped):  # transformers logs these bare
        return "warning"
    if not prefix:
        return ""
    if "INFO" in prefix:
        return "info"
    if "DEBUG" in prefix:
        return "debug"
    if "WARN" in prefix:
        return "warning"
    if "ERROR" in prefix or "CRITICAL" in prefix:
        return "error"
    return ""


QUIET_ONLY_MAX_LINES = 50  # a longer paste of logger lines is a start-up log, not a question about one line


def _quiet_only(lines: list[str]) -> bool:
    if len(lines) > QUIET_ONLY_MAX_LINES:
        return False
    said = [ln for ln in lines if ln.strip()]
    return bool(said) and all(_level(ln, clean_line(ln).strip()) in ("info", "debug", "warning") for ln in said)


def _is_frame_or_code(cleaned: str) -> bool:
    return cleaned.startswith((" ", "\t")) or cleaned.lstrip().startswith(("^", "~"))


def _interesting_lines(text_lower: str, extra: tuple[str, ...] = ()) -> list[int]:
    """Indices of lines containing a keyword, all keywords found in one Aho-Corasick pass."""
    return for_lines((*_KEYWORDS, *extra)).lines_hit(text_lower)


def _with_lines_after_frames(interesting: list[int], lines: list[str]) -> list[int]:
    """Add the line that follows each run of traceback frames: it is where the exception message is, and a
    message without any keyword ("data did not match any variant of untagged enum ModelWrapper", a Rust
    panic) would otherwise be lost when the paste starts inside the traceback (no header to walk from)."""
    extra: set[int] = set()
    for idx in interesting:
        if 'File "' not in lines[idx] or not _FRAME.match(clean_line(lines[idx])):
            continue
        nxt = idx + 1
        while nxt < len(lines) and nxt - idx <= 8:
            cleaned = clean_line(lines[nxt])
            if cleaned.strip() and not (_FRAME.match(cleaned) or _is_frame_or_code(cleaned)):
                # not an unindented code line between two frames (some pastes lose the indentation)
                after = next((clean_line(ln) for ln in lines[nxt + 1 : nxt + 4] if ln.strip()), "")
                if not _FRAME.match(after):
                    extra.add(nxt)
                break
            nxt += 1
    return sorted(extra.union(interesting)) if extra else interesting


def extra_keywords(literals: list[str]) -> tuple[str, ...]:
    """Lower-cased literals (e.g. from KB signatures) that the built-in keywords would not find, so a
    line that a signature can match is never dropped by the pre-filter."""
    out = []
    for lit in literals:
        lit = lit.lower().strip()
        if len(lit) >= 5 and not any(kw in lit for kw in _KEYWORDS) and lit not in out:
            out.append(lit)
    return tuple(out)


def distill(paste: Paste | str, notes: tuple[str, ...] = (), keywords: tuple[str, ...] = ()) -> Distilled:
    """Distil a decoded paste. Linear in its size. `keywords` extends the pre-filter (see extra_keywords).
    Plain text is redacted first (bot.diagnosis.paste.redacted), so nothing distilled ever holds a secret."""
    paste = redacted(paste)
    text, notes = paste.text, (*paste.notes, *notes)
    total_bytes = len(text)
    if "\x1b" in text:
        text = strip_ansi(text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _ipython_as_python(text)
    lines = text.split("\n")
    interesting = _with_lines_after_frames(_interesting_lines(text.lower(), (*keywords, *_FRAME_KEYWORDS)), lines)
    cjk = sum(1 for _ in islice(_CJK.finditer(text), 6))

    seen: set[str] = set()  # masked text of lines already kept (folds ranks / repeats)
    roots: list[LogLine] = []
    frames_for_root: dict[int, list[LogLine]] = {}
    context: list[LogLine] = []
    info_context: list[LogLine] = []
    candidates: deque[LogLine] = deque(maxlen=MAX_CANDIDATES)
    head_candidates: list[LogLine] = []  # the first lines are kept too: the root error is often early
    dangling_frames: list[LogLine] = []
    loose_frames: list[LogLine] = []
    wrapped: list[WrappedLine] = []
    truncated = False
    next_free = 0  # lines before this index were consumed by a traceback walk

    seen_raw: set[str] = set()
    kept = set(interesting)
    for idx in interesting:
        if idx < next_free:
            continue
        raw = lines[idx]
        if raw in seen_raw:  # exact repeats cost one set lookup
            continue
        seen_raw.add(raw)
        cleaned = clean_line(raw)
        stripped = cleaned.strip()
        if not stripped:
            continue
        tb = _TRACEBACK_START.search(stripped)
        if tb:
            # "Exception in worker …: NCCL error: …, Traceback (most recent call last):" carries the
            # error itself before the traceback header: keep that part as a root line too.
            head = stripped[: tb.start()].rstrip(" ,:;")
            # A bare class name (IPython's header) is only the root when the exception line is missing.
            bare_class = bool(_EXCEPTION_LINE.match(head)) and " " not in head
            if len(head) > 15 and not bare_class and mask(head) not in seen:
                seen.add(mask(head))
                line = LogLine(idx + 1, head, "root")
                roots.append(line)
                _keep(candidates, head_candidates, line)
            # the header itself: it ties an error record above it to this traceback (bot/diagnosis/match.py)
            if not head:
                _keep(candidates, head_candidates, LogLine(idx + 1, stripped, "context"))
            exc, frames, next_free = _walk_traceback(lines, idx + 1)
            if exc is None and bare_class and mask(head) not in seen:
                seen.add(mask(head))
                line = LogLine(idx + 1, head, "root")
                roots.append(line)
                _keep(candidates, head_candidates, line)
            # Every frame stays visible to signatures (a fingerprint is often a frame: capture_model, a
            # Windows path), whether or not the traceback reached its exception line.
            for frame in frames:
                _keep(candidates, head_candidates, frame)
            if exc is None:
                dangling_frames.extend(frames[-FRAMES_PER_TRACEBACK * 2:])
                truncated = next_free >= len(lines)  # not just a traceback longer than the walk limit
                continue
            key = mask(exc.text)
            if key not in seen:
                seen.add(key)
                roots.append(exc)
                frames_for_root[exc.line_no] = frames[-FRAMES_PER_TRACEBACK * 2:]
                _keep(candidates, head_candidates, exc)
            continue
        key = mask(stripped)
        if key in seen or _CHAINED.match(stripped):
            continue
        seen.add(key)
        if _FRAME.match(cleaned.lstrip()):
            # A frame outside a traceback we walked (the paste starts inside one): a frame all the same.
            frame = LogLine(idx + 1, cleaned, "frame")
            loose_frames.append(frame)
            _keep(candidates, head_candidates, frame)
            code = clean_line(lines[idx + 1]) if idx + 1 < len(lines) and idx + 1 not in kept else ""
            if code.startswith((" ", "\t")) and code.strip() and not _FRAME.match(code):
                # the code line under it, which no keyword kept (a walked traceback keeps it): where a traceback
                # cut here failed
                _keep(candidates, head_candidates, LogLine(idx + 2, code, "frame"))
            continue
        level = _level(raw, stripped)
        if BOILERPLATE_RE.search(stripped):  # visible to signatures, but not evidence or query
            _keep(candidates, head_candidates, LogLine(idx + 1, stripped, "context", level))
            continue
        if level in ("info", "debug"):
            # INFO/DEBUG lines are never the error, even when they mention memory or CUDA; they are
            # kept for signatures (metrics lines) and as a last resort for context.
            line = LogLine(idx + 1, stripped, "context", level)
            info_context.append(line)
            _keep(candidates, head_candidates, line)
            continue
        is_root = bool(
            _ROOT_MARKERS.search(stripped) or _EXCEPTION_LINE.match(stripped) or _ERROR_WORD.search(stripped)
        ) or bool(_LEVEL_ERROR.match(raw.lstrip()) and not _is_frame_or_code(cleaned))
        if is_root and _EMPTY_MESSAGE.match(stripped):
            more, after = _message_continuation(lines, idx + 1)
            if more:
                stripped, next_free = f"{stripped} {more}", after
        elif is_root:
            more, _ = _wrapped_continuation(lines, idx + 1, stripped)
            if more:
                wrapped.append(WrappedLine(LogLine(idx + 1, f"{stripped} {more}", "root", level), len(stripped)))
        line = LogLine(idx + 1, stripped, "root" if is_root else "context", level)
        (roots if is_root else context).append(line)
        _keep(candidates, head_candidates, line)
        if is_root and loose_frames:  # the error line those frames led to
            frames_for_root.setdefault(line.line_no, loose_frames[-FRAMES_PER_TRACEBACK * 2:])
            loose_frames = []

    dangling_frames.extend(loose_frames)  # frames no error line followed
    # A traceback cut before its exception line: its last frames are the evidence that is left, wherever they
    # sit relative to the other error lines.
    evidence = _select_evidence(roots, frames_for_root, context or info_context[-10:], lines, dangling_frames)
    by_line = {c.line_no: c for c in (*head_candidates, *candidates)}
    cleaned_all = tuple(sorted(by_line.values(), key=lambda c: c.line_no)) or evidence
    root_errors = tuple(_limit_roots(roots))
    return Distilled(
        evidence=evidence,
        root_errors=root_errors,
        query=_build_query(root_errors, evidence, dangling_frames),
        total_lines=len(lines),
        total_bytes=total_bytes,
        language="zh" if cjk >= 6 else "en",
        notes=notes,
        cleaned=cleaned_all,
        truncated=truncated or _ends_in_frames(lines),
        quiet_only=_quiet_only(lines),
        wrapped=tuple(wrapped),
    )


def _walk_traceback(lines: list[str], start: int) -> tuple[LogLine | None, list[LogLine], int]:
    """Follow a traceback from the line after its header to its exception line.

    Returns (exception line, or None when the traceback was cut before it: the paste ends, or a line follows
    that no exception line looks like; its frames; the index to resume at)."""
    frames: list[LogLine] = []
    idx = start
    limit = min(len(lines), start + MAX_TRACEBACK_LINES)
    # A traceback printed indented as a whole (pip's "[output]" of a failed build, a nested log): its exception
    # line sits at the header's indentation, its frames and code deeper.
    header = clean_line(lines[start - 1]) if start > 0 else ""
    indent = len(header) - len(header.lstrip(" ")) if header.lstrip(" ").startswith("Traceback") else 0
    while idx < limit:
        cleaned = clean_line(lines[idx])
        if not cleaned.strip():
            idx += 1
            continue
        at_header_indent = 0 < indent >= len(cleaned) - len(cleaned.lstrip(" "))
        if _FRAME.match(cleaned) or (_is_frame_or_code(cleaned) and not at_header_indent):
            frames.append(LogLine(idx + 1, cleaned, "frame"))
            idx += 1
            continue
        text = cleaned.strip()
        if frames and not _closes_traceback(text):
            # Cut: the next thing pasted (an INFO line, another failure) is not this traceback's exception.
            return None, frames, idx
        if _EMPTY_MESSAGE.match(text):
            more, after = _message_continuation(lines, idx + 1)
            if more:
                return LogLine(idx + 1, f"{text} {more}", "root"), frames, after
        return LogLine(idx + 1, text, "root"), frames, idx + 1
    return None, frames, idx


def _message_continuation(lines: list[str], start: int) -> tuple[str, int]:
    """("RuntimeError:" is followed by its message on the next line: a multi-line message) the next non-blank
    line when it continues the message, and the index after it; ("", start) when it does not."""
    nxt = next((j for j in range(start, min(len(lines), start + 2)) if lines[j].strip()), None)
    if nxt is None:
        return "", start
    more = clean_line(lines[nxt]).strip()
    if _FRAME.match(more) or _TRACEBACK_START.search(more) or _closes_traceback(more):
        return "", start
    return more, nxt + 1


WRAP_MAX_LINES = 4  # a message soft-wrapped by a narrow terminal or rich's console spans a few lines at most
_SENTENCE_END = re.compile(r"[.!?)\]}>\"'`。！？]$")


def _wrapped_continuation(lines: list[str], start: int, first: str) -> tuple[str, int]:
    """(An error message a narrow terminal or rich's console wrapped: "load failed: The number of required" /
    "GPUs exceeds the total number of" / "available GPUs in the placement group.") the lines that continue
    the message, joined, and the index after them; ("", start) when the message ends on its own line.

    A continuation is a bare line (no logger prefix, no indentation) right below, that does not start a record
    of its own (no frame, error marker or exception name); the message ends at a sentence end or a blank line."""
    parts: list[str] = []
    idx = start
    text = first
    while idx < len(lines) and len(parts) < WRAP_MAX_LINES and not _SENTENCE_END.search(text):
        raw = lines[idx].rstrip()
        text = raw.strip()
        if (
            not text
            or raw != text
            or clean_line(raw) != raw
            or _FRAME.match(text)
            or _TRACEBACK_START.search(text)
            or _closes_traceback(text)
            or _ERROR_WORD.search(text)
            or BOILERPLATE_RE.search(text)
        ):
            break
        parts.append(text)
        idx += 1
    return " ".join(parts), idx


# What ends a traceback: "pkg.mod.SomeError: message", "RayTaskError(ValueError): …", a bare
# "KeyboardInterrupt", or an error marker.
_EXCEPTION_HEAD = re.compile(r"^[A-Za-z_][\w.]*(?:\([\w.]*\))?(?::|$)")


_EMPTY_MESSAGE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception):$")


def _closes_traceback(text: str) -> bool:
    if _TRACEBACK_START.search(text):
        return False
    return bool(_EXCEPTION_HEAD.match(text) or _EXCEPTION_LINE.match(text) or _ROOT_MARKERS.search(text))


_FRAME_ANYWHERE = re.compile(r'File "[^"]+", line \d+, in ')
# Python 3.11+ marks the failing expression under a frame's code line: "    ^^^^^^" (after an optional "[rank0]:").
_CARETS = re.compile(r"^(?:\[[^\]]*\]:?)?[\s^~]*[\^~]{3,}[\s^~]*$")


def _ends_in_frames(lines: list[str]) -> bool:
    """True when the paste ends with a traceback frame (its code line and caret marks may follow): it was
    cut before the exception line, e.g. only the top of a traceback was copied."""
    tail = [clean_line(ln) for ln in lines[-50:] if ln.strip()][-5:]
    i = len(tail) - 1
    while i >= 0 and _CARETS.match(tail[i]):
        i -= 1
    if i < 0:
        return False
    if _FRAME_ANYWHERE.search(tail[i]):
        return True
    last = tail[i].strip()
    if _EXCEPTION_LINE.match(last) or _ROOT_MARKERS.search(last):
        return False
    return i >= 1 and bool(_FRAME_ANYWHERE.search(tail[i - 1]))  # the code line under the last frame


def _keep(candidates: deque[LogLine], head: list[LogLine], line: LogLine) -> None:
    if len(head) < 200:
        head.append(line)
    else:
        candidates.append(line)


def _limit_roots(roots: list[LogLine]) -> list[LogLine]:
    if len(roots) <= MAX_ROOTS:
        return roots
    return roots[:4] + roots[-(MAX_ROOTS - 4):]


def _select_evidence(
    roots: list[LogLine],
    frames_for_root: dict[int, list[LogLine]],
    context: list[LogLine],
    lines: list[str],
    dangling: Sequence[LogLine] = (),
) -> tuple[LogLine, ...]:
    chosen: dict[int, LogLine] = {f.line_no: f for f in dangling[-FRAMES_PER_TRACEBACK * 2:]}
    for root in _limit_roots(roots):
        chosen[root.line_no] = root
        for frame in frames_for_root.get(root.line_no, [])[-FRAMES_PER_TRACEBACK * 2:]:
            chosen.setdefault(frame.line_no, frame)
    room = MAX_EVIDENCE - len(chosen)
    if room > 0 and context:
        if roots:
            # Only context just before a root error explains it; the rest of a long paste is noise.
            anchors = [r.line_no for r in roots]
            near = [c for c in context if any(0 < a - c.line_no <= CONTEXT_WINDOW for a in anchors)]
            for c in near[-room:]:
                chosen.setdefault(c.line_no, c)
        else:  # no error line at all (warnings, slowness): the last interesting lines, logger warnings last
            loud = [c for c in context if c.level not in _QUIET]
            quiet = [c for c in context if c.level in _QUIET]
            for c in [*loud[-min(room, 20):], *quiet][: min(room, 20)]:
                chosen.setdefault(c.line_no, c)
    if not chosen:  # nothing looked like an error: keep the last lines so the user sees what we saw
        tail = [(i + 1, clean_line(raw).strip()) for i, raw in enumerate(lines) if raw.strip()][-20:]
        for line_no, text in tail:
            if text:
                chosen[line_no] = LogLine(line_no, text, "context")
    return tuple(sorted(chosen.values(), key=lambda c: c.line_no)[:MAX_EVIDENCE])


_INSTALL_ROOTS = ("site-packages/", "dist-packages/")
_PACKAGES = ("/vllm/", "/torch/", "/transformers/", "/ray/", "/triton/")


def _frame_words(path: str, function: str, with_module: bool) -> str:
    """A frame as query words: file and function, and, for a traceback that lost its exception line, the
    module path below the install root (vllm v1 worker gpu_model_runner), the best clue left to what failed."""
    path = path.replace("\\", "/")
    if with_module and path.endswith(".py"):
        cut = max((path.rfind(r) + len(r) for r in _INSTALL_ROOTS if r in path), default=-1)
        if cut < 0:
            cut = max((path.rfind(p) + 1 for p in _PACKAGES if p in path), default=-1)
        if cut >= 0:
            return f"{path[cut:-3].replace('/', ' ')} {function}"
    return f"{path.rsplit('/', 1)[-1]} {function}"


def _build_query(roots: tuple[LogLine, ...], evidence: tuple[LogLine, ...], dangling: Sequence[LogLine] = ()) -> str:
    """Masked query: root errors first (the dense encoder reads ~256 tokens), then frames and context. The
    last frames of a cut traceback come right after the errors, innermost first: they are what is left of
    the failure."""
    parts: list[str] = []
    seen: set[str] = set()
    # Errors before warnings: the encoder reads only the start, and start-up warnings that mention "error"
    # or "unsupported" must not push the crash out of it.
    # Logger warnings (ordinary start-up output: the enforce-eager hint, FP8 scales) come after everything else.
    ordered = [r for r in roots if r.level != "warning"]
    cut = list(reversed(dangling[-FRAMES_PER_TRACEBACK * 2:]))
    cut_lines = {f.line_no for f in cut}
    loud = [e for e in evidence if e.level not in _QUIET]
    quiet = [r for r in roots if r.level == "warning"] + [e for e in evidence if e.level in _QUIET]
    for line in (*ordered, *cut, *loud, *quiet):
        text = line.text
        m = _FRAME.match(text)
        if m:  # a frame contributes its module and function names, not the path noise
            text = _frame_words(m.group(1), m.group(3), line.line_no in cut_lines)
        masked = mask(text)
        if masked and masked not in seen:
            seen.add(masked)
            parts.append(masked)
    return "\n".join(parts)[:6000]
