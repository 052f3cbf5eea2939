"""What changed between a working run and the failing one (issue 25, item 6: `explain LOG --since GOOD.log`).

Both logs are read by the same facts reader (bot/diagnosis/facts.py); every setting both state and state differently
is a `Change`, grouped as versions, engine arguments and memory figures, with the line of each side. A setting only
one log states is not a change we know of (the other may have used the default) and is left out. Pure.
"""

from __future__ import annotations

import re
from typing import Literal

from bot.diagnosis.root import read_root
from bot.models import Change, Distilled, LogFacts

# what a vLLM server prints once it serves (or has sized its KV cache): a start-up that worked
_STARTED = re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM API server|"
                      r"# (?:GPU|CUDA) blocks: [1-9]|GPU KV cache size: [1-9]|Available KV cache memory: \d*[1-9]|"
                      r"num_gpu_blocks is: [1-9]")

_GROUPS: tuple[tuple[Literal["versions", "engine", "memory"], tuple[str, ...]], ...] = (
    ("versions", ("vllm_version", "torch_version", "cuda_version", "driver_version", "python_version")),
    ("engine", ("model", "dtype", "quantization", "kv_cache_dtype", "max_model_len", "tensor_parallel_size",
                "pipeline_parallel_size", "gpu_memory_utilization", "enforce_eager", "block_size", "port",
                "gpu_name", "gpu_count", "compute_capability")),
    ("memory", ("total_gpu_memory_gib", "weights_gib", "activation_peak_gib", "non_torch_gib", "kv_cache_gib",
                "kv_cache_tokens", "gpu_blocks", "cpu_blocks", "max_concurrency", "estimated_max_model_len")),
)


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def what_changed(good: LogFacts, bad: LogFacts) -> list[Change]:
    """The settings both logs state with different values: versions first, then engine args, then memory."""
    out: list[Change] = []
    for group, names in _GROUPS:
        for name in names:
            before, after = getattr(good, name), getattr(bad, name)
            if before is None or after is None or before == after:
                continue
            out.append(Change(group, name, _shown(before), _shown(after), good.sources.get(name),
                              bad.sources.get(name)))
    return out


def healthy_startup(text: str, distilled: Distilled, facts: LogFacts) -> bool:
    """A log of a start-up that worked: it names its model, says the server came up (or sized a positive KV
    cache) and states no error to fix. Slack keeps such a log as the channel's working run of that model."""
    if not facts.model or read_root(distilled, facts, "unknown", ()).root is not None:
        return False
    return _STARTED.search(text) is not None


def changes_to_json(changes: list[Change]) -> list[dict[str, object]]:
    return [{"group": c.group, "name": c.name, "before": c.before, "after": c.after,
             "before_line": c.before_line, "after_line": c.after_line} for c in changes]


__all__ = ["changes_to_json", "what_changed"]
