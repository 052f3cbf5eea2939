"""Fleet view of a group diagnosis: each host against the group's majority, and against a saved baseline.

"Works on host03, fails on host07" is usually a difference nobody wrote down: another driver, torch
wheel, /dev/shm size or environment variable. `fleet_facts` reads the comparable facts of every host
from the check results; `fleet_diff` names the hosts that differ from the majority, field by field;
`baseline_drift` compares a run with the facts of a known-good one (`diagnose GROUP --save-baseline`).
Pure functions over values: 200 hosts take a few milliseconds (bench/bench_pictures.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.runner.report import DiagnosisReport, HostReport

# Environment variables whose value changes how vLLM/NCCL/CUDA behave; a difference between hosts matters.
RELEVANT_ENV = (
    "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_DEBUG",
    "GLOO_SOCKET_IFNAME", "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1", "VLLM_WORKER_MULTIPROC_METHOD",
    "HF_HUB_OFFLINE", "CUDA_LAUNCH_BLOCKING", "LD_LIBRARY_PATH", "PYTORCH_CUDA_ALLOC_CONF",
)


def _gib(value: Any) -> str | None:
    if isinstance(value, (int, float)) and value > 0:
        return f"{value / 2**30:.1f} GiB"
    return None


def _names(value: Any) -> str | None:
    if isinstance(value, list) and value:
        return ", ".join(str(v) for v in value)
    return None


def _text(value: Any) -> str | None:
    if value is None or value == "" or value == []:
        return None
    return str(value)


# field label → (check id, fact name, formatter). Order is the order shown.
FIELDS: tuple[tuple[str, str, str, Callable[[Any], str | None]], ...] = (
    ("driver", "gpu.driver", "driver_version", _text),
    ("CUDA (driver)", "gpu.driver", "cuda_version", _text),
    ("GPU model", "gpu.inventory", "names", _names),
    ("GPU count", "gpu.inventory", "gpu_count", _text),
    ("torch", "python.torch", "version", _text),
    ("torch CUDA", "python.torch", "cuda", _text),
    ("NCCL", "python.torch", "nccl_version", _text),
    ("vLLM", "python.vllm_install", "version", _text),
    ("Python", "python.runtime", "version", _text),
    ("/dev/shm", "system.shm", "size_bytes", _gib),
)


@dataclass(frozen=True)
class HostFacts:
    host: str
    values: dict[str, str]  # field label → shown value; absent when the host did not report it


@dataclass(frozen=True)
class Difference:
    host: str
    field: str
    value: str
    majority: str
    majority_hosts: int
    compared_hosts: int

    def sentence(self) -> str:
        return (f"{self.host} differs from {self.majority_hosts} of {self.compared_hosts} hosts: "
                f"{self.field} {self.value} vs {self.majority}")


@dataclass(frozen=True)
class Disagreement:
    """Hosts that report different values of a field with no strict majority to blame one of them (two hosts
    that differ, or a group split down the middle): the hosts differ, and on what."""

    field: str
    values: tuple[tuple[str, str], ...]  # (host, value), in the report's host order

    def sentence(self) -> str:
        shown = ", ".join(f"{host} {value}" for host, value in self.values)
        if len(self.values) == 2:
            return (f"the 2 hosts differ on {self.field}: {shown} (with two hosts neither can be called the odd "
                    "one; check which value is intended)")
        return f"the {len(self.values)} hosts split on {self.field} with no majority: {shown}"


@dataclass(frozen=True)
class Drift:
    host: str
    field: str
    baseline: str
    now: str

    def sentence(self) -> str:
        return f"{self.host}: {self.field} changed since the baseline: {self.baseline} → {self.now}"


def _env_values(host: HostReport) -> dict[str, str]:
    out: dict[str, str] = {}
    for check in host.checks:
        if check.id != "env.vars":
            continue
        shown = check.facts.get("vars")
        if isinstance(shown, dict):
            for name in RELEVANT_ENV:  # unset is a value too: "set on one host only" is the usual story
                value = shown.get(name)
                out[f"env {name}"] = str(value) if value not in (None, "") else "(unset)"
    return out


def host_facts(host: HostReport) -> HostFacts:
    values: dict[str, str] = {}
    by_id = {c.id: c for c in host.checks}
    for label, check_id, fact, fmt in FIELDS:
        check = by_id.get(check_id)
        if check is None or check.verdict in ("error", "timeout"):
            continue
        shown = fmt(check.facts.get(fact))
        if shown is not None:
            values[label] = shown
    values.update(_env_values(host))
    return HostFacts(host.host, values)


def fleet_facts(report: DiagnosisReport) -> list[HostFacts]:
    """Facts of every host that could be checked (unreachable hosts have none to compare)."""
    return [host_facts(h) for h in report.hosts if not h.error]


def fleet_diff(facts: Iterable[HostFacts], min_hosts: int = 3) -> list[Difference]:
    """Hosts whose value of a field differs from a strict majority of the hosts that report the field.

    Needs at least `min_hosts` hosts; a field without a strict majority (half the fleet on each side) is
    reported for nobody, since there is no "usual" value to blame one host for.
    """
    order = {f[0]: i for i, f in enumerate(FIELDS)}
    hosts = list(facts)
    if len(hosts) < min_hosts:
        return []
    labels: list[str] = []
    for h in hosts:
        labels += [label for label in h.values if label not in labels]
    out: list[Difference] = []
    for label in labels:
        counts = Counter(h.values[label] for h in hosts if label in h.values)
        reporting = sum(counts.values())
        majority, n = counts.most_common(1)[0]
        if n * 2 <= reporting or len(counts) == 1:
            continue
        for h in hosts:
            # A host that did not report the field shows that as a failed check in the grid already.
            value = h.values.get(label)
            if value is None or value == majority:
                continue
            out.append(Difference(h.host, label, value, majority, n, reporting))
    out.sort(key=lambda d: (d.host, order.get(d.field, len(order)), d.field))
    return out


def fleet_disagreements(facts: Iterable[HostFacts]) -> list[Disagreement]:
    """Fields on which at least two hosts report different values but no strict majority exists, so
    `fleet_diff` names no odd host: a 2-host group that disagrees, or a group split down the middle."""
    hosts = list(facts)
    if len(hosts) < 2:
        return []
    order = {f[0]: i for i, f in enumerate(FIELDS)}
    labels: list[str] = []
    for h in hosts:
        labels += [label for label in h.values if label not in labels]
    out: list[Disagreement] = []
    for label in labels:
        values = tuple((h.host, h.values[label]) for h in hosts if label in h.values)
        counts = Counter(v for _, v in values)
        if len(counts) < 2:
            continue
        if counts.most_common(1)[0][1] * 2 > len(values) and len(values) >= 3:
            continue  # a strict majority: fleet_diff names the odd hosts
        out.append(Disagreement(label, values))
    out.sort(key=lambda d: (order.get(d.field, len(order)), d.field))
    return out


def field_area(label: str) -> str:
    """The check area a compared field comes from (`env` for environment variables), for the grid."""
    for name, check_id, _fact, _fmt in FIELDS:
        if name == label:
            return check_id.split(".", 1)[0]
    return "env" if label.startswith("env ") else "host"


def baseline_of(report: DiagnosisReport) -> dict[str, dict[str, str]]:
    """The comparable facts of a run, as stored for `--save-baseline` (host → field → value)."""
    return {f.host: dict(f.values) for f in fleet_facts(report)}


def baseline_drift(report: DiagnosisReport, baseline: Mapping[str, Mapping[str, str]]) -> list[Drift]:
    """Every field whose value changed since the baseline, for hosts present in both."""
    out: list[Drift] = []
    for now in fleet_facts(report):
        before = baseline.get(now.host)
        if before is None:
            continue
        for label in list(before) + [k for k in now.values if k not in before]:
            old, new = before.get(label), now.values.get(label)
            if old != new:
                out.append(Drift(now.host, label, old or "(not reported)", new or "(not reported)"))
    return out
