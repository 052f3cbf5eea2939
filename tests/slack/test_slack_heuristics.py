"""The watch-channel heuristic: logs in, chatter out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from slack_logs import CHATTER, KV_CACHE_LOG

from bot.slack.heuristics import looks_like_error_log

KB_DIR = Path(__file__).resolve().parents[2] / "kb" / "cases"

LOGS = [
    KV_CACHE_LOG,
    "ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks.",
    "```\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n```",
    "Traceback (most recent call last):\n  File \"/x/y.py\", line 3, in <module>\nImportError: libcudart.so.12: cannot open shared object file",
    "node-3:1234:1234 [0] NCCL WARN Call to connect returned Connection refused\nnode-3:1234:1234 [0] NCCL INFO retrying",
    "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported",
]


@pytest.mark.parametrize("text", LOGS)
def test_logs_are_recognised(text: str) -> None:
    assert looks_like_error_log(text)


@pytest.mark.parametrize("text", [*CHATTER, "", "   ", "RuntimeError: ?"])
def test_chatter_is_ignored(text: str) -> None:
    assert not looks_like_error_log(text)


def test_most_kb_example_logs_are_recognised() -> None:
    """The KB's real-world example logs (pasted from public issues) are what people paste."""
    examples = []
    for path in sorted(KB_DIR.glob("*/*.yaml")):
        case = yaml.safe_load(path.read_text(encoding="utf-8"))
        examples += [ex["log"] for ex in case.get("examples", [])]
    assert len(examples) >= 20
    recognised = sum(looks_like_error_log(log) for log in examples)
    assert recognised / len(examples) >= 0.8, f"only {recognised}/{len(examples)} KB example logs recognised"
