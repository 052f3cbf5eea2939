"""The pictures, fleet view and report draft from the command line (real CLI processes, real sshd hosts)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from kb.loader import load_kb
from tests.conftest import REPO

KB = load_kb()


def run_cli(args: list[str], index_dir: Path, tmp_path: Path, stdin: bytes | None = None,
            **env: str) -> subprocess.CompletedProcess[bytes]:
    environ = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), VLLM_DOCTOR_AUDIT_DB=str(tmp_path / "audit.db"),
                   NO_COLOR="1", **env)
    environ.pop("VLLM_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "bot", *args], input=stdin, capture_output=True, env=environ,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def built_index(doctor, index_dir: Path) -> Path:
    return index_dir  # the session doctor built it; the CLI reuses it


def _profiling_line() -> str:
    """A real vLLM memory-profiling line, as a KB example quotes it."""
    for case in KB.cases:
        for ex in case.examples:
            for line in ex.log.splitlines():
                if "total_gpu_memory=" in line and "kv_cache_size=" in line:
                    return line.strip()
    raise AssertionError("no memory-profiling line in the KB examples")


def test_explain_plot_draws_the_memory_picture_from_the_log(built_index: Path, tmp_path: Path) -> None:
    log = _profiling_line() + "\nValueError: No available memory for the cache blocks. Try increasing " \
        "`gpu_memory_utilization` when initializing the engine.\n"
    png = tmp_path / "mem.png"
    proc = run_cli(["explain", "--no-llm", "--plot", str(png), "-"], built_index, tmp_path, stdin=log.encode())
    assert proc.returncode == 0, proc.stderr.decode()
    image = Image.open(io.BytesIO(png.read_bytes()))
    assert image.format == "PNG" and image.size[0] >= 1000
    assert "picture written to" in proc.stderr.decode()


def test_explain_plot_without_numbers_says_so_and_writes_nothing(built_index: Path, tmp_path: Path) -> None:
    png = tmp_path / "none.png"
    log = KB.by_id()["port-in-use"].examples[0].log
    proc = run_cli(["explain", "--no-llm", "--plot", str(png), "-"], built_index, tmp_path, stdin=log.encode())
    assert proc.returncode == 0, proc.stderr.decode()
    assert not png.exists() and "no GPU memory numbers" in proc.stderr.decode()


def test_report_draft_command_prints_every_section(built_index: Path, tmp_path: Path) -> None:
    sample = REPO / "docs" / "samples" / "kv-cache-oom.log"
    proc = run_cli(["report-draft", str(sample)], built_index, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    from bot.present.report_draft import SECTIONS, sections_of

    assert list(sections_of(out)) == list(SECTIONS)
    assert "vLLM Version: 0.8.5.post1" in out  # read from the log's own lines
    target = tmp_path / "draft.md"
    proc = run_cli(["report-draft", str(sample), "-o", str(target)], built_index, tmp_path)
    assert proc.returncode == 0 and target.read_text(encoding="utf-8").startswith("# [Bug]: ")
    assert "nothing was sent anywhere" in proc.stderr.decode()


@pytest.mark.sshd
def test_diagnose_group_fleet_diff_baseline_drift_and_pictures(built_index: Path, tmp_path: Path) -> None:
    from runner_support import start_fleet

    hosts = {f"gpu0{i}": (f"127.0.0.{i + 1}", "healthy") for i in range(1, 4)}
    hosts["gpu04"] = ("127.0.0.5", "driver-535")
    fleet = start_fleet(tmp_path, hosts)
    env = {"VLLM_DOCTOR_INVENTORY": str(fleet.inventory_path), "VLLM_DOCTOR_KNOWN_HOSTS": str(fleet.harness.known_hosts),
           "VLLM_DOCTOR_SSH_CONFIG": str(fleet.settings.runner_ssh_config)}
    try:
        grid, mem = tmp_path / "grid.png", tmp_path / "mem.png"
        first = run_cli(["diagnose", "fleet", "--json", "--no-progress", "--save-baseline", "--check", "gpu",
                         "--grid", str(grid), "--plot", str(mem)], built_index, tmp_path, **env)
        data = json.loads(first.stdout)
        assert data["fleet_diff"] == ["gpu04 differs from 3 of 4 hosts: driver 535.104.05 vs 570.86.15"]
        assert data["drift"] == []
        assert [h["host"] for h in data["hosts"]] == list(hosts)  # the documented keys are still there
        with Image.open(grid) as grid_png, Image.open(mem) as mem_png:
            assert grid_png.size[0] >= 800 and mem_png.size[0] >= 1000
        # the planted host's driver changes after the baseline: the next run names that drift first
        smi = fleet.root / "profiles" / "driver-535" / "nvidia-smi.txt"
        smi.write_text(smi.read_text().replace("535.104.05", "535.183.01"))
        second = run_cli(["diagnose", "fleet", "--no-progress", "--check", "gpu"], built_index, tmp_path, **env)
        text = second.stdout.decode()
        assert text.splitlines()[0] == ("drift: gpu04: driver changed since the baseline: 535.104.05 → 535.183.01")
    finally:
        fleet.stop()


def _small_kb(tmp_path: Path) -> Path:
    """15 real cases (about 50 documents: more than one embedding batch)."""
    import shutil

    kb_dir = tmp_path / "kb"
    for case in sorted(KB.cases, key=lambda c: c.id)[:15]:
        src = REPO / "kb" / "cases" / case.area / f"{case.id}.yaml"
        (kb_dir / case.area).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, kb_dir / case.area / src.name)
    return kb_dir


def test_index_build_shows_a_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    import pty

    kb_dir = _small_kb(tmp_path)
    piped = run_cli(["index", "--rebuild"], tmp_path / "idx-piped", tmp_path, VLLM_DOCTOR_KB_DIR=str(kb_dir))
    assert piped.returncode == 0, piped.stderr.decode()
    assert "embedding KB documents" not in piped.stderr.decode() and "index ready: 15 cases" in piped.stdout.decode()

    primary, secondary = pty.openpty()
    environ = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(tmp_path / "idx-tty"), VLLM_DOCTOR_KB_DIR=str(kb_dir),
                   NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "bot", "index", "--rebuild"], stdin=secondary, stdout=secondary,
                            stderr=secondary, env=environ, close_fds=True)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=300) == 0, seen.decode(errors="replace")[-2000:]
    os.close(primary)
    text = seen.decode(errors="replace")
    assert "embedding KB documents" in text and "51/51" in text and "index ready: 15 cases" in text
