"""The search index's lifecycle as one small service that bot/pipeline.py composes: the embedding model
(made once per process, loaded only when something must be embedded or a dense query is made), and the
index opened for a KB (incremental: only new or changed cases are re-embedded) or rebuilt.

The pipeline keeps the KB it serves; when the index was written for newer case files than the KB it was
opened with (another process added a case meanwhile), `open` returns that newer KB and the pipeline
serves it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.errors import IndexUnavailable
from bot.ops import metrics
from bot.settings import Settings
from kb.loader import KnowledgeBase, load_kb
from kb.schema import Case

log = logging.getLogger("bot.pipeline")  # the warnings keep the logger name they always had


class IndexLifecycle:
    """The encoder and the index of one pipeline (shared by its `with_settings` copies' lock)."""

    def __init__(self, settings: Settings, cases_dir: Path, *, from_dir: bool, lock: threading.RLock) -> None:
        self.settings = settings
        self.cases_dir = cases_dir
        self.from_dir = from_dir  # the KB is read from cases_dir: the index is written for the newest files
        self.build_progress = False  # a progress bar while (re-)embedding: `vllm-doctor index` on a terminal
        self.encoder_instance: Any = None
        self._lock = lock

    def encoder(self) -> Any:
        """The embedding model, made once per process and loaded only when a dense query needs it."""
        with self._lock:
            if self.encoder_instance is None:
                self.encoder_instance = self.make_encoder()
                self.encoder_instance.progress = self.build_progress
            return self.encoder_instance

    def make_encoder(self) -> Any:
        """The ONNX path (no torch import) unless VLLM_DOCTOR_ENCODER=torch or the model cannot run there."""
        from indexer.encoder import SentenceTransformerEncoder

        if self.settings.encoder == "onnx":
            from indexer.onnx_encoder import OnnxEncoder, OnnxUnsupported

            try:
                return OnnxEncoder(self.settings.embed_model_path, onnx_dir=self.settings.onnx_dir)
            except OnnxUnsupported as exc:
                log.warning("search model: %s; using the torch path", exc)
        return SentenceTransformerEncoder(self.settings.embed_model_path)

    def open(
        self, kb: KnowledgeBase, *, current: Callable[[KnowledgeBase], bool], force_rebuild: bool = False
    ) -> tuple[Any, KnowledgeBase]:
        """Open the index → (index, the KB it was written for). The KB is read again under the index's
        directory lock, so a case another process wrote meanwhile is indexed too (never lost from the saved
        index); `current(kb)`: no case file was added, removed or touched since `kb` was read (then the
        ~200 YAML files are not parsed again)."""
        from indexer.encoder import EncoderUnavailable
        from indexer.index import KBIndex

        newest = [kb]

        def reread() -> list[Case]:
            if current(kb):
                return list(kb.cases)
            newest[0] = load_kb(self.cases_dir, strict=False)
            return list(newest[0].cases)

        started = time.monotonic()
        try:
            index = KBIndex.open(kb, Path(self.settings.index_dir), self.encoder, force_rebuild=force_rebuild,
                                 reread=reread if self.from_dir else None)
        except EncoderUnavailable as exc:
            raise IndexUnavailable(str(exc)) from exc
        metrics.INDEX_BUILD_SECONDS.set(time.monotonic() - started)
        return index, newest[0]


__all__ = ["IndexLifecycle"]
