"""GPU memory and fleet pictures: real PNGs of a phone-readable size that show the expected labels."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from bot.models import CheckResult, FleetReport, HostReport, LogFacts
from bot.present.memory_view import host_memory_bars, log_memory_bars, log_memory_title
from bot.present.pictures import GridCell, MemoryBar, Segment, fleet_grid_picture, memory_picture

# The numbers of a real KV-cache failure: 24 GiB GPU at 0.9, weights 15.0 + activation 4.6 + non-torch 2.4.
KV_SHORT = LogFacts(gpu_name="NVIDIA L4", total_gpu_memory_gib=22.0, gpu_memory_utilization=0.9,
                    weights_gib=14.99, activation_peak_gib=4.2, non_torch_gib=1.0, kv_cache_gib=-0.4)


def _png(picture) -> Image.Image:
    image = Image.open(io.BytesIO(picture.png))
    image.load()
    return image


def test_log_memory_picture_marks_the_negative_kv_cache():
    bars = log_memory_bars(KV_SHORT)
    assert len(bars) == 1
    kv = [s for s in bars[0].segments if s.name == "KV cache"][0]
    assert kv.failing and kv.gib == pytest.approx(-0.4)
    title = log_memory_title(KV_SHORT)
    assert "KV cache -0.4 GiB" in title
    pic = memory_picture(bars, title)
    image = _png(pic)
    assert image.format == "PNG"
    assert image.size == (pic.width_px, pic.height_px)
    assert 1000 <= image.size[0] <= 1600 and image.size[1] >= 300  # readable when a phone scales it down
    drawn = " | ".join(pic.labels)
    for label in ("KV cache: -0.4 GiB", "15.0", "budget 19.8 GiB", "total 22.0 GiB", "NVIDIA L4", "weights"):
        assert label in drawn, (label, drawn)


def test_kv_cache_is_computed_from_the_budget_when_the_log_omits_it():
    facts = LogFacts(total_gpu_memory_gib=80.0, gpu_memory_utilization=0.9, weights_gib=50.0,
                     activation_peak_gib=10.0, non_torch_gib=2.0, tensor_parallel_size=2, gpu_name="A100")
    bar = log_memory_bars(facts)[0]
    kv = [s for s in bar.segments if s.name == "KV cache"][0]
    assert kv.gib == pytest.approx(80 * 0.9 - 62.0) and not kv.failing
    assert "TP=2" in bar.label


def test_weights_larger_than_the_budget_are_the_failing_part():
    facts = LogFacts(total_gpu_memory_gib=24.0, gpu_memory_utilization=0.9, weights_gib=26.0)
    seg = log_memory_bars(facts)[0].segments[0]
    assert seg.name == "weights" and seg.failing


def test_no_picture_without_numbers():
    assert log_memory_bars(LogFacts(vllm_version="0.6.3")) == ()
    assert log_memory_bars(LogFacts(total_gpu_memory_gib=80.0)) == ()
    with pytest.raises(ValueError):
        memory_picture([], "nothing")


def _host(name: str, used_mib: float, total_mib: float = 81559) -> HostReport:
    per_gpu = [{"index": "0", "name": "H100", "total_mib": total_mib, "used_mib": used_mib}]
    return HostReport(host=name, checks=[CheckResult("gpu.inventory", "GPU count", "ok", "ok",
                                                     facts={"per_gpu": per_gpu})])


def test_host_memory_bar_flags_a_foreign_process_that_leaves_too_little():
    report = FleetReport(target="g", hosts=[_host("gpu01", 1), _host("gpu02", 70 * 1024, 80 * 1024)])
    bars = host_memory_bars(report, utilization=0.9)
    assert [b.label.split(" (")[0] for b in bars] == ["gpu01 GPU0", "gpu02 GPU0"]
    assert "10.0 GiB free" in bars[1].label
    assert not any(s.failing for s in bars[0].segments)
    used, share = bars[1].segments
    assert used.gib == pytest.approx(70.0) and share.failing and share.gib == pytest.approx(72.0)
    pic = memory_picture(bars, "GPU memory on g")
    assert _png(pic).size == (pic.width_px, pic.height_px)
    assert "vLLM share: 62.0 GiB short" in pic.labels


def test_fleet_grid_picture_has_every_host_and_area():
    hosts = [f"gpu{i:02d}" for i in range(1, 9)]
    areas = ["cuda", "env", "gpu", "python", "server", "system"]
    cells = {(h, a): GridCell("ok") for h in hosts for a in areas}
    cells[("gpu07", "gpu")] = GridCell("fail", "driver too old")
    cells[("gpu03", "env")] = GridCell("warn")
    pic = fleet_grid_picture(hosts, areas, cells, "fleet: 8 hosts")
    image = _png(pic)
    assert image.size == (pic.width_px, pic.height_px) and image.size[0] >= 800
    for text in [*hosts, *areas, "FAIL", "WARN", "fleet: 8 hosts"]:
        assert text in pic.labels
    # the failing cell is red: sample the picture where matplotlib drew it
    assert sum(1 for label in pic.labels if label == "FAIL") == 1


def test_memory_picture_segments_are_in_order():
    bar = MemoryBar("GPU0", 10.0, 9.0, (Segment("weights", 5.0), Segment("KV cache", 3.0)))
    pic = memory_picture([bar], "t")
    assert pic.labels.index("5.0") < pic.labels.index("3.0")
