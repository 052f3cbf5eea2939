"""Session fixture `vllm_server`: one real vLLM CPU server for the whole test run.

Import it into tests/conftest.py:   from vllm_support import vllm_server  # noqa: F401

- Venv missing (scripts/install_vllm_cpu.sh not run): SKIP locally, FAIL when CI=true, so CI can
  never pass by silently skipping the real-server tests.
- The server failing to become healthy is an error with the tail of its log, never a skip.
- A test that kills the server (crash simulation) must call `vllm_server.start()` afterwards; start()
  is a no-op while the server runs, so any test can call it first to be safe.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vllm_server import DEFAULT_VENV, VLLMServer, VLLMServerError, make_tiny_model, venv_ready


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    if not venv_ready(DEFAULT_VENV):
        message = f"real vLLM server unavailable: no vllm in {DEFAULT_VENV}; run scripts/install_vllm_cpu.sh"
        if _in_ci():
            pytest.fail(message + " (CI=true: the vLLM integration tests must run in CI)")
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("vllm")
    server = VLLMServer(
        make_tiny_model(workdir / "tiny-model"),
        log_path=workdir / "server.log",
        cache_root=workdir / "cache",
    )
    try:
        server.start()
    except VLLMServerError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()
