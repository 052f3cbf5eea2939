"""Does a watch-channel message look like a pasted error log, or is it ordinary chatter?

Only watch channels use this (DMs, mentions and commands are explicit requests). A false positive costs
the channel an unwanted thread reply, a false negative only means someone mentions the bot, so the rule
leans towards silence: it wants log *structure* (log-level prefixes, traceback frames, exception lines at
the start of a line), not merely the word "error" inside a sentence.
"""

from __future__ import annotations

import re

# Each pattern matches one *line* that a human would rarely type in a sentence.
_STRONG_LINE_PATTERNS = [
    re.compile(r"Traceback \(most recent call last\):"),
    re.compile(r'\bFile "[^"]+", line \d+'),
    # an exception line: "ValueError: …", "torch.OutOfMemoryError: …", optionally after a log prefix
    re.compile(r"^(?:.*\]\s*|.*\|\s*)?(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit):(?:\s|$)"),
    # vLLM / Python logging prefixes: "ERROR 11-18 18:07:28 engine.py:366]", "(EngineCore pid=1) ERROR …"
    re.compile(r"\b(?:ERROR|CRITICAL|FATAL|WARNING)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}"),
    re.compile(r"^\s*\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}\S*\s+(?:ERROR|CRITICAL|FATAL|E)\b"),
    re.compile(r"^\s*\[?(?:ERROR|CRITICAL|FATAL)\]?[\s:]|\b(?:ERROR|CRITICAL):\s"),
    re.compile(r"\bNCCL (?:WARN|INFO)\b"),
    re.compile(r"\bCUDA error: "),
    re.compile(r"\bNVRM: Xid\b"),
    re.compile(r"Segmentation fault|core dumped|Aborted \(core dumped\)|Fatal Python error"),
    re.compile(r"^\s*(?:E|F)\d{4} \d{2}:\d{2}:\d{2}"),  # glog-style lines from NCCL/gloo
    re.compile(r"\|\s*(?:ERROR|CRITICAL)\s*\|"),  # "2024-02-20 21:46:23 | ERROR | stderr |"
    re.compile(r"cannot open shared object file|undefined symbol: |Failed to initialize NVML|NVRM: "),
    re.compile(r"terminate called after throwing|Error while finding module specification|^\s*Aborted\b"),
    re.compile(r"CUDA error at \S+|code=\d+\(cuda\w+\)|\bcuda\w*Error\w*\b"),
    re.compile(r"^\s*(?:\[rank\d+\]:|\(\w+ pid=\d+\))"),  # vLLM worker / torchrun rank prefixes
    re.compile(r"\bCheck failed: |\bCUDA error \d+\b|\bIllegal instruction\b"),  # glog CHECKs, numbered CUDA errors
    re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\([\"']"),  # an exception's repr: ValueError("…")
    re.compile(r"^\s*\[\d{4}-\d{2}-\d{2} [\d:.,]+ [EF] \d+ \d+\]"),  # Ray / glog C++ lines: "[2025-06-13 01:49:41,730 E 1 1]"
    re.compile(r"\b(?:[a-z_]\w*\.){2,}[A-Z]\w+: \S"),  # a fully qualified exception class mid-line
    re.compile(r"\bwhich is incompatible\.?$|\bValue error, "),  # pip's resolver; pydantic validation
]
# A single line that *starts* with an exception and says something substantial is a paste, not a remark.
_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):\s+\S.{29,}")
_WEAK_WORDS = re.compile(r"\b(?:error|exception|failed|traceback|oom|out of memory|cuda|nccl|vllm)\b", re.I)


def looks_like_error_log(text: str) -> bool:
    """True when `text` has log-shaped error lines: two strong signals (one line can carry both: a log
    prefix and an exception), or one strong line inside a code fence or among other lines."""
    if not text or not text.strip():
        return False
    lines = [ln for ln in text.replace("\r\n", "\n").split("\n") if ln.strip() and ln.strip() != "```"]
    # a line that is log-shaped twice over (a log prefix *and* an exception) counts double
    strong = sum(min(2, sum(1 for p in _STRONG_LINE_PATTERNS if p.search(ln))) for ln in lines)
    if strong >= 2:
        return True
    if strong == 1:
        fenced = "```" in text
        return (
            fenced
            or len(lines) >= 3
            or (len(lines) >= 2 and bool(_WEAK_WORDS.search(text)))
            or any(_EXCEPTION_LINE.match(ln) for ln in lines)
            # one long machine-written line (a copied error message) rather than a remark about one
            or (len(lines) == 1 and len(lines[0]) >= 80 and not lines[0].rstrip().endswith("?"))
        )
    return False
