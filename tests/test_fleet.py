"""Fleet diff and baseline drift: unit tests on built reports, and the real sshd stand-in hosts."""

from __future__ import annotations

import pytest

from bot.models import CheckResult, FleetReport, HostReport
from bot.runner.fleet_diff import baseline_drift, baseline_of, fleet_diff, fleet_facts


def _host(name: str, driver: str = "550.54.15", torch: str = "2.5.1", shm: int = 16 * 2**30,
          env: dict[str, str] | None = None, error: str | None = None) -> HostReport:
    checks = [
        CheckResult("gpu.driver", "driver", "ok", "ok", facts={"driver_version": driver, "cuda_version": "12.4"}),
        CheckResult("gpu.inventory", "gpus", "ok", "ok", facts={"names": ["NVIDIA H100 80GB HBM3"], "gpu_count": 8}),
        CheckResult("python.torch", "torch", "ok", "ok", facts={"version": torch, "cuda": "12.4"}),
        CheckResult("system.shm", "shm", "ok", "ok", facts={"size_bytes": shm}),
        CheckResult("env.vars", "env", "ok", "ok", facts={"vars": env or {}}),
    ]
    return HostReport(host=name, checks=[] if error else checks, error=error)


def test_one_host_with_another_driver_is_named_with_the_field():
    hosts = [_host(f"host{i:02d}") for i in range(1, 9)]
    hosts[6] = _host("host07", driver="535.104.05")
    diff = fleet_diff(fleet_facts(FleetReport(target="a100", hosts=hosts)))
    assert [(d.host, d.field) for d in diff] == [("host07", "driver")]
    assert diff[0].sentence() == "host07 differs from 7 of 8 hosts: driver 535.104.05 vs 550.54.15"


def test_env_and_shm_differences_and_unreachable_hosts():
    hosts = [_host("a"), _host("b"), _host("c", shm=64 * 2**20, env={"NCCL_P2P_DISABLE": "1"}),
             _host("d", error="unreachable")]
    diff = fleet_diff(fleet_facts(FleetReport(target="g", hosts=hosts)))
    assert {(d.host, d.field) for d in diff} == {("c", "/dev/shm"), ("c", "env NCCL_P2P_DISABLE")}
    shm = next(d for d in diff if d.field == "/dev/shm")
    assert shm.value == "0.1 GiB" and shm.majority == "16.0 GiB"


def test_no_majority_no_blame_and_small_groups():
    split = [_host("a"), _host("b"), _host("c", torch="2.6.0"), _host("d", torch="2.6.0")]
    assert fleet_diff(fleet_facts(FleetReport(target="g", hosts=split))) == []
    two = [_host("a"), _host("b", driver="535.104.05")]
    assert fleet_diff(fleet_facts(FleetReport(target="g", hosts=two))) == []


def test_baseline_drift_names_what_changed():
    good = FleetReport(target="g", hosts=[_host("a"), _host("b")])
    baseline = baseline_of(good)
    now = FleetReport(target="g", hosts=[_host("a"), _host("b", torch="2.6.0", env={"VLLM_USE_V1": "0"})])
    drift = baseline_drift(now, baseline)
    assert [(d.host, d.field, d.baseline, d.now) for d in drift] == [
        ("b", "torch", "2.5.1", "2.6.0"), ("b", "env VLLM_USE_V1", "(unset)", "0")]
    assert baseline_drift(good, baseline) == []


@pytest.mark.sshd
def test_fleet_diff_on_real_sshd_names_exactly_the_planted_host(tmp_path):
    from runner_support import run_diagnosis, start_fleet

    hosts = {f"gpu0{i}": (f"127.0.0.{i + 1}", "healthy") for i in range(1, 4)}
    hosts["gpu04"] = ("127.0.0.5", "driver-535")  # same stack, another driver: planted
    fleet = start_fleet(tmp_path, hosts)
    messages: list[str] = []
    try:
        report = run_diagnosis("fleet", settings=fleet.settings, checks=["gpu", "python", "system", "env"],
                               progress=messages.append)
    finally:
        fleet.stop()
    # progress counts hosts done out of the group, never backwards, ending at 4/4
    counts = [int(m.split("/", 1)[0]) for m in messages]
    assert all(m.split(" hosts done · ", 1)[0].endswith("/4") for m in messages)
    assert counts == sorted(counts) and counts[-1] == 4 and messages[-1].startswith("4/4 hosts done · ")
    assert all(h.error is None for h in report.hosts), [h.error for h in report.hosts]
    diff = fleet_diff(fleet_facts(report))
    assert [(d.host, d.field) for d in diff] == [("gpu04", "driver")]
    assert diff[0].value == "535.104.05" and diff[0].majority_hosts == 3


def test_baseline_store_keeps_the_newest_per_target(tmp_path):
    from bot.runner.baseline import BaselineStore

    store = BaselineStore(tmp_path / "audit.sqlite3")
    assert store.latest("a100") is None
    store.save("a100", {"gpu01": {"driver": "550.54.15"}}, saved_by="cli:ops", now=100.0)
    store.save("a100", {"gpu01": {"driver": "550.90.07"}}, saved_by="U1", now=200.0)
    store.save("h100", {"gpu09": {"driver": "535.104.05"}}, now=300.0)
    again = BaselineStore(tmp_path / "audit.sqlite3")  # survives a restart
    latest = again.latest("a100")
    assert latest is not None and latest.facts == {"gpu01": {"driver": "550.90.07"}} and latest.saved_by == "U1"
    assert again.latest("h100").facts["gpu09"]["driver"] == "535.104.05"


# --- issue 28: a group's disagreement is named even without a majority, and the grid shows it -------------
def test_two_hosts_that_disagree_are_named_with_the_field():
    from bot.runner.fleet_diff import fleet_disagreements

    two = FleetReport(target="pair", hosts=[_host("a"), _host("b", driver="535.104.05")])
    assert fleet_diff(fleet_facts(two)) == []  # nobody can be called the odd one
    [d] = fleet_disagreements(fleet_facts(two))
    assert d.field == "driver" and d.values == (("a", "550.54.15"), ("b", "535.104.05"))
    assert d.sentence().startswith("the 2 hosts differ on driver: a 550.54.15, b 535.104.05")
    split = [_host("a"), _host("b"), _host("c", torch="2.6.0"), _host("d", torch="2.6.0")]
    [s] = fleet_disagreements(fleet_facts(FleetReport(target="g", hosts=split)))
    assert s.sentence() == "the 4 hosts split on torch with no majority: a 2.5.1, b 2.5.1, c 2.6.0, d 2.6.0"
    hosts = [_host(f"h{i}") for i in range(4)] + [_host("odd", driver="535.104.05")]
    assert fleet_disagreements(fleet_facts(FleetReport(target="g", hosts=hosts))) == []  # fleet_diff's job


def test_grid_is_not_all_green_when_the_fleet_diff_names_an_odd_host():
    from bot.runner.fleet_view import FleetView, grid_cells

    hosts = [_host(f"h{i}") for i in range(3)] + [_host("odd", driver="535.104.05")]
    report = FleetReport(target="g", hosts=hosts)
    _areas, plain = grid_cells(report)
    assert {c.verdict for c in plain.values()} == {"ok"}
    view = FleetView(fleet_diff(fleet_facts(report)), [], False, None)
    _areas, cells = grid_cells(report, view)
    assert cells[("odd", "gpu")].verdict == "warn" and "driver 535.104.05 vs 550.54.15" in cells[("odd", "gpu")].note
    assert {k for k, c in cells.items() if c.verdict != "ok"} == {("odd", "gpu")}
