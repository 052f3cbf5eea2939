"""Pure text normalisation shared by queries (bot.diagnosis.distill) and indexed KB examples.

The same functions clean a pasted log and a KB example, so both sides of a search look alike:
ANSI codes and log prefixes removed, then variable parts masked Drain-style.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves) and OSC sequences (titles, hyperlinks).
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Other control characters except tab (newlines are handled by splitlines()).
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Log prefixes, stripped repeatedly from the start of a line (they nest: docker | (Worker pid) ERROR …).
_PREFIXES = [
    # docker compose / kubectl multi-container: "vllm-1  | ", "vllm_1 | "
    r"[A-Za-z0-9][\w.\-]*\s+\|\s",
    # CI log tables: "  | "
    r"\|\s+",
    # torch.distributed's per-rank prefix on every line of a multi-process crash: "[rank0]: "
    r"\[rank\d+\]:[ \t]?",
    # a line-number column ("3597\t…": a log copied from a numbered viewer)
    r"\d{1,7}\t",
    # colour codes whose ESC byte was lost on the way (a web page, a chat client): "[1;36m(APIServer pid=1)[0;0m "
    r"\[\d{1,3}(?:;\d{1,3})*m\s*",
    # ISO / bracketed timestamps: "[2025-03-10T15:07:20Z] ", "2024-05-01 12:00:00,123 "
    r"\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?(?:\s*-)?\s+",
    # worker / Ray actor prefixes: "(VllmWorker rank=0 pid=123) ", "(EngineCore_DP0 pid=1) ",
    # "(RayWorkerWrapper pid=1, ip=10.0.0.1) ", "(pid=12) ", "(raylet) "
    r"\((?:[A-Za-z_][\w\-]*(?:\s+[\w\-]+=[^)\s,]+,?)*|[\w\-]*\s*pid=\d+[^)]*|raylet|autoscaler[^)]*)\)\s*",
    # vLLM logger: "ERROR 04-28 15:55:45 worker_base.py:157] " and "INFO 10-25 13:08:43 [core.py:708] "
    r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+"
    r"(?:\[[^\]]*\]|[\w./\-]+:\d+\])\s?",
    # python logging: "ERROR:vllm.engine:" / "2024-01-01 12:00:00 - vllm - ERROR - " (after timestamp strip)
    r"(?:[\w.]+\s+-\s+)?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+-\s+",
    # bare level with colon: "ERROR: " (uvicorn) — keep the rest
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+",
]
PREFIX_RE = re.compile("(?:" + "|".join(_PREFIXES) + ")")

# Drain-style masks for the lexical/dense query. Order matters: paths before numbers.
_MASKS = [
    # PEP 3149 ABI tags name the Python build, not the failure: "__init__.cpython-39-x86_64-linux-gnu.so"
    (re.compile(r"\.cpython-\d+\w*-[\w-]+(?=\.so\b)"), ""),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), " <uuid> "),
    (re.compile(r"(?:(?<=\s)|^|(?<=[\"'(=]))(?:[A-Za-z]:)?(?:[~.]{0,2}/[^\s\"'():,]+)+/([^\s\"'():,/]+)"), r" <path>/\1 "),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), " <ip> "),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{10,}\b"), " <hex> "),
    # not inside identifiers: bf16, H100, float16 and sm_90 stay whole
    (re.compile(r"(?<![A-Za-z_0-9])[-+]?\d+(?:\.\d+)*(?:e[-+]?\d+)?(?![A-Za-z_])"), " <num> "),
]
_SPACES = re.compile(r"[ \t]+")

# Lines that accompany many different failures and say nothing about which one: CUDA's async-error
# advice, traceback chaining, vLLM's generic "see above" wrappers. They are dropped from queries and
# from indexed examples so they do not make unrelated failures look alike.
BOILERPLATE_RE = re.compile(
    r"CUDA kernel errors might be asynchronously reported|consider passing CUDA_LAUNCH_BLOCKING=1|"
    r"Compile with `?TORCH_USE_CUDA_DSA|^The above exception was the direct cause|"
    r"^During handling of the above exception|This might cause deadlock in distributed execution|"
    r"Engine core initialization failed\. See root cause above|EngineCore failed to start\.?$|"
    r"^Traceback \(most recent call last\)|^Exception raised from \w+ at |^frame #\d+: |"
    r"^\[rank\d+\]:\s*$|^\^+$|^~+\^*~*$|"
    # torch >= 2.4 prints this at the exit of almost every multi-GPU crash
    r"destroy_process_group\(\) was not called before program exit"
)


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def strip_prefixes(line: str) -> str:
    """Remove timestamps, log-level headers, docker and worker/Ray prefixes from one line."""
    for _ in range(6):  # prefixes nest a few levels at most
        m = PREFIX_RE.match(line)
        if not m or m.end() == 0:
            break
        line = line[m.end():]
    return line


def clean_line(line: str) -> str:
    """ANSI-free, prefix-free, control-free, right-stripped line (leading indentation kept)."""
    line = CONTROL_RE.sub("", strip_ansi(line))
    return strip_prefixes(line.lstrip(" ") if line[:1] == " " and PREFIX_RE.match(line.lstrip(" ")) else line).rstrip()


def mask(line: str) -> str:
    """Replace variable parts (numbers, hex, paths, IPs, UUIDs) with placeholders."""
    for pattern, repl in _MASKS:
        line = pattern.sub(repl, line)
    return _SPACES.sub(" ", line).strip()


def normalize_log_text(text: str, max_lines: int = 200) -> str:
    """Clean + mask + de-duplicate a short log (used for KB examples)."""
    seen: set[str] = set()
    out: list[str] = []
    for raw in strip_ansi(text).splitlines():
        cleaned = clean_line(raw)
        if BOILERPLATE_RE.search(cleaned.strip()):
            continue
        masked = mask(cleaned)
        if masked and masked not in seen:
            seen.add(masked)
            out.append(masked)
            if len(out) >= max_lines:
                break
    return "\n".join(out)
