"""Stress variants of a labelled log for `vllm-doctor eval` (docs/matching.md, "Evaluation").

Each variant is built deterministically from the log (seeded by its id), so two runs score the same pastes:
  noisy         the log buried in 300-1,200 lines of ordinary vLLM start-up output, with real start-up
                warnings (enforce-eager hint, FP8 scaling factors, tokenizer, deprecation, NCCL INFO) mixed in
  truncated     the paste cut just before the exception line that closes its last traceback, so the frames
                remain (Slack truncation, copying the top only); only logs whose traceback has such a line
                (a log already cut inside its traceback is a truncated paste of the clean set)
  two-failures  the log followed by another, unrelated failure: the earliest root error is the answer
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer.text import clean_line

NOISE_MIN_LINES, NOISE_MAX_LINES = 300, 1200
NOISE_TAIL_LINES = 20
WARNINGS_PER_PASTE = (6, 12)

# The last line that states an exception: "ValueError: …", "torch.OutOfMemoryError: …", "RuntimeError …",
# "ERROR … Exception …". A traceback header or frame is not one.
_EXCEPTION_LINE = re.compile(
    r"(?:^|[\s:|\]])(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?!\s*\(most)"
)
# A traceback frame anywhere on the line (after a logger or rank prefix).
_FRAME = re.compile(r'File "[^"]+", line \d+')
_RANK = re.compile(r"^\s*\[rank\d+\]:")
# "torch.OutOfMemoryError: …", "RayTaskError(ValueError): …", a bare "AssertionError", or any dotted
# CamelCase name and ": " ("torch._dynamo.exc.BackendCompilerFailed: backend=…").
_EXCEPTION_AT_START = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:(?:Error|Exception|Exit|Interrupt|Failure|Fault)(?:\([\w.]*\))?(?::|$)|: )"
)
TRACEBACK_TAIL_LINES = 8  # code and caret lines between the last frame and the exception line


@dataclass(frozen=True)
class StartupNoise:
    """Ordinary start-up output to bury logs in: verbatim healthy start-ups and real warning lines."""

    healthy: tuple[tuple[str, ...], ...]
    warnings: tuple[tuple[str, ...], ...]  # groups (enforce-eager, FP8, deprecation, ...): each paste gets one of each


def load_warnings(path: Path) -> tuple[tuple[str, ...], ...]:
    """Warning lines grouped by the comment block above them; '#' lines name the group and its sources."""
    groups: list[list[str]] = []
    starts_group = True
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            starts_group = True
        elif line.strip():
            if starts_group:
                groups.append([])
                starts_group = False
            groups[-1].append(line)
    return tuple(tuple(g) for g in groups)


def _rng(key: str) -> random.Random:
    return random.Random(zlib.crc32(key.encode("utf-8")))


def bury(log: str, noise: StartupNoise, key: str) -> str:
    """The log placed after 300-1,200 lines of start-up output with warnings mixed in, and a short tail after
    it, the way a real 100 KB paste looks."""
    rng = _rng("noisy:" + key)
    total = rng.randint(NOISE_MIN_LINES, NOISE_MAX_LINES)
    source = noise.healthy[rng.randrange(len(noise.healthy))] if noise.healthy else ("INFO Starting vLLM",)
    lines: list[str] = []
    while len(lines) < total:
        lines.extend(source)
    before = lines[: total - NOISE_TAIL_LINES]
    # One line of every warning group (so the enforce-eager hint is in every noisy paste), plus a few more.
    chosen = [rng.choice(group) for group in noise.warnings if group]
    pool = [w for group in noise.warnings for w in group if w not in chosen]
    extra = rng.randint(*WARNINGS_PER_PASTE) - len(chosen)
    chosen += rng.sample(pool, max(0, min(extra, len(pool))))
    for warning in chosen:
        before.insert(rng.randrange(len(before) + 1), warning)
    after = list(source[-NOISE_TAIL_LINES:])
    return "\n".join([*before, log, *after])


def truncate(log: str) -> str | None:
    """The paste cut just before the exception line of its last traceback: every frame remains, the line that
    says what failed (and all after it) is gone. None when the log has no traceback frame, or no exception
    line follows its last frame's code (the traceback is already cut)."""
    lines = log.splitlines()
    last_frame = max((i for i, line in enumerate(lines) if _FRAME.search(line)), default=None)
    if last_frame is None:
        return None
    seen = 0
    for i in range(last_frame + 1, len(lines)):
        text = _RANK.sub("", clean_line(lines[i])).strip()
        if not text:
            continue
        if _EXCEPTION_AT_START.match(text):
            return "\n".join(lines[:i])
        seen += 1  # the frame's code line, its caret marks
        if seen > TRACEBACK_TAIL_LINES:
            break
    return None


def partner_index(i: int, labels: Sequence[str | None], groups: Sequence[str]) -> int | None:
    """A second failure for log i: the next log (cyclically) with a different label from another group."""
    n = len(labels)
    for step in range(1, n):
        j = (i + 6 + step) % n  # skip the neighbours in the file (often the same case)
        if labels[j] != labels[i] and groups[j] != groups[i]:
            return j
    return None


def two_failures(first: str, second: str) -> str:
    return f"{first}\n{second}"
