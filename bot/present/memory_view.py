"""What fills a GPU, as bars for bot/present/pictures.py: from the facts a log states, or from a host diagnosis.

A log's memory-profiling line gives one GPU's budget (total × gpu_memory_utilization) split into weights,
activation peak, non-torch memory and the KV cache that is left; a KV cache ≤ 0 is the failing part.
A host diagnosis gives each GPU's used and total memory; another process holding so much that vLLM's
planned share no longer fits is the failing part.
"""

from __future__ import annotations

from bot.models import FleetReport, LogFacts
from bot.present.pictures import MemoryBar, Segment

MIB_PER_GIB = 1024.0
DEFAULT_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization


def log_memory_bars(facts: LogFacts) -> tuple[MemoryBar, ...]:
    """One bar per GPU (the profiling numbers are per GPU), or none when the log lacks the numbers."""
    parts = [("weights", facts.weights_gib), ("activation peak", facts.activation_peak_gib),
             ("non-torch", facts.non_torch_gib)]
    known = [(name, v) for name, v in parts if v is not None]
    total = facts.total_gpu_memory_gib
    if total is None or total <= 0 or (not known and facts.kv_cache_gib is None):
        return ()
    util = facts.gpu_memory_utilization
    budget = total * util if util is not None else None
    kv = facts.kv_cache_gib
    if kv is None and budget is not None and len(known) == len(parts):
        kv = budget - sum(v for _, v in known)  # what vLLM itself computes
    segments = [Segment(name, v, failing=name == "weights" and budget is not None and v >= budget)
                for name, v in known]
    if kv is not None:
        segments.append(Segment("KV cache", kv, failing=kv <= 0))
    tp = facts.tensor_parallel_size
    gpu = facts.gpu_name or "GPU"
    label = f"{gpu} (per GPU, TP={tp})" if tp and tp > 1 else gpu
    return (MemoryBar(label=label, total_gib=total, budget_gib=budget, segments=tuple(segments)),)


def log_memory_title(facts: LogFacts) -> str:
    bars = log_memory_bars(facts)
    if not bars:
        return ""
    failing = [s for s in bars[0].segments if s.failing]
    if failing:
        s = failing[0]
        return f"GPU memory: {s.name} {s.gib:+.1f} GiB does not fit"
    return "GPU memory at start-up (from the log)"


def host_memory_bars(report: FleetReport, utilization: float = DEFAULT_UTILIZATION) -> tuple[MemoryBar, ...]:
    """One bar per GPU of every host: used memory against total, and the share vLLM plans to take."""
    bars: list[MemoryBar] = []
    for host in report.hosts:
        # gpu.inventory reads each GPU's memory; so does gpu.processes (`--check gpu.processes` alone)
        per_gpu = next((c.facts.get("per_gpu") for c in (host.check("gpu.inventory"), host.check("gpu.processes"))
                        if c is not None and isinstance(c.facts.get("per_gpu"), list)), None)
        if not isinstance(per_gpu, list):
            continue
        for gpu in per_gpu:
            total_mib, used_mib = gpu.get("total_mib"), gpu.get("used_mib")
            if not isinstance(total_mib, (int, float)) or total_mib <= 0:
                continue
            total = total_mib / MIB_PER_GIB
            used = (used_mib or 0) / MIB_PER_GIB
            planned = total * utilization
            # vLLM checks at start-up that its whole share is free: used + planned must fit in total.
            fits = used + planned <= total
            free = total - used
            segments = (Segment("used by others", used), Segment("vLLM share", planned, failing=not fits))
            bars.append(MemoryBar(label=f"{host.host} GPU{gpu.get('index')} ({free:.1f} GiB free)",
                                  total_gib=total, budget_gib=None, segments=segments))
    return tuple(bars)
