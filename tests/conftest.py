"""Shared fixtures. The real MiniLM model and the real KB are loaded once per test session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The ONNX export of MiniLM (indexer/onnx_encoder.py, ~10 s with torch) is made once per machine and user,
# outside ~/.cache; every test process and CLI subprocess shares it. Tests of the export itself use their own.
os.environ.setdefault(
    "VLLM_DOCTOR_ONNX_DIR", str(Path(tempfile.gettempdir()) / f"vllm-doctor-test-onnx-{os.getuid()}")
)

REPO = Path(__file__).resolve().parent.parent
EVAL_DIR = REPO / "tests" / "eval"
HEALTHY_DIR = EVAL_DIR / "healthy"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the real vLLM server is a `vllm` test wherever it lives (`make test-fast` skips them)."""
    for item in items:
        if "vllm_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(autouse=True)
def _settings_read_per_test() -> Iterator[None]:
    """The CLI reads settings once per process (bot.settings.get_settings is cached); a test that sets
    VLLM_DOCTOR_* variables must not see what an earlier test on the same worker read."""
    from bot.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("index")


@pytest.fixture(scope="session")
def settings(index_dir: Path):
    from bot.settings import Settings

    # Stores go to temp files too: tests never write ~/.cache/vllm-doctor.
    return Settings(index_dir=index_dir, kb_db_path=index_dir / "kb-growth.sqlite3")


@pytest.fixture(scope="session")
def doctor(settings):
    """The real engine: bundled KB, real all-MiniLM-L6-v2, FAISS + BM25 index built in a temp dir."""
    from bot.pipeline import Pipeline

    doc = Pipeline.from_settings(settings)
    _ = doc.matcher  # build the index once, up front
    return doc


@pytest.fixture(scope="session")
def healthy_logs() -> dict[str, str]:
    logs = {p.name: p.read_text(encoding="utf-8") for p in sorted(HEALTHY_DIR.glob("*.log"))}
    assert logs, f"no healthy start-up logs in {HEALTHY_DIR}"
    return logs


# A throw-away PostgreSQL server (session-scoped) and a fresh database per test; fails under CI=true when
# the server binaries are missing. Used by the storage tests, which run on SQLite and PostgreSQL alike.
from postgres_support import postgres_server, postgres_url  # noqa: E402,F401

# The real vLLM CPU server (session-scoped; started on first use, stopped at the end). Shared by the LLM,
# Slack and runner tests; fails loudly under CI=true when its venv is missing.
from vllm_support import vllm_server  # noqa: E402,F401
