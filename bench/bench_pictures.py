"""Pictures and the fleet view: render time of a memory picture and a 40-host grid, fleet diff over 200
hosts' facts. Targets (issue: pictures): a picture < 300 ms, fleet diff over 200 hosts < 50 ms.

    .venv/bin/python bench/bench_pictures.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.models import (  # noqa: E402
    CheckResult,
    FleetReport,
    HostReport,
    LogFacts,  # noqa: E402
)
from bot.present.memory_view import log_memory_bars, log_memory_title  # noqa: E402
from bot.present.pictures import GridCell, fleet_grid_picture, memory_picture  # noqa: E402
from bot.runner.fleet_diff import fleet_diff, fleet_facts  # noqa: E402


def timed(fn, n: int) -> tuple[float, float]:
    fn()  # warm-up: font cache, imports
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def host(i: int) -> HostReport:
    driver = "535.104.05" if i == 7 else "550.54.15"
    return HostReport(host=f"gpu{i:03d}", checks=[
        CheckResult("gpu.driver", "d", "ok", "", facts={"driver_version": driver, "cuda_version": "12.4"}),
        CheckResult("gpu.inventory", "g", "ok", "", facts={"names": ["NVIDIA H100 80GB HBM3"], "gpu_count": 8}),
        CheckResult("python.torch", "t", "ok", "", facts={"version": "2.5.1", "cuda": "12.4", "nccl_version": "2.21.5"}),
        CheckResult("python.vllm_install", "v", "ok", "", facts={"version": "0.6.4"}),
        CheckResult("python.runtime", "p", "ok", "", facts={"version": "3.12.3"}),
        CheckResult("system.shm", "s", "ok", "", facts={"size_bytes": 2**34}),
        CheckResult("env.vars", "e", "ok", "", facts={"vars": {"NCCL_SOCKET_IFNAME": "eth0"}}),
    ])


def main() -> None:
    facts = LogFacts(gpu_name="NVIDIA L4", total_gpu_memory_gib=22.0, gpu_memory_utilization=0.9,
                     weights_gib=14.99, activation_peak_gib=4.2, non_torch_gib=1.0, kv_cache_gib=-0.4)
    p50, p95 = timed(lambda: memory_picture(log_memory_bars(facts), log_memory_title(facts)), 20)
    print(f"memory picture (1 GPU): p50 {p50:.0f} ms, p95 {p95:.0f} ms (target < 300 ms)")
    hosts = [f"gpu{i:02d}" for i in range(40)]
    areas = ["cuda", "env", "gpu", "model", "python", "server", "system"]
    cells = {(h, a): GridCell("ok") for h in hosts for a in areas}
    p50, p95 = timed(lambda: fleet_grid_picture(hosts, areas, cells, "fleet"), 10)
    print(f"fleet grid picture (40 hosts x 7 areas): p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    report = FleetReport(target="fleet", hosts=[host(i) for i in range(200)])
    p50, p95 = timed(lambda: fleet_diff(fleet_facts(report)), 50)
    print(f"fleet diff, 200 hosts: p50 {p50:.1f} ms, p95 {p95:.1f} ms (target < 50 ms)")


if __name__ == "__main__":
    main()
