"""KBIndex: dense (MiniLM vectors in FAISS) and lexical (BM25) search over KB cases, kept on disk.

This module is the index's lifecycle: open (load, update or build), upsert/remove/rebuild, persist. The
query-time ranking over the state it holds is indexer.search; each case is several documents
(indexer.documents); the on-disk format (manifest, data-file generations, directory lock) is in
indexer.persist, the in-memory snapshot in indexer.state.

`KBIndex.open()` reuses what it can: vectors are keyed by the sha256 of their document text, so only new
or changed documents are embedded. Anything unusable (missing, truncated, bad JSON, wrong shape, other
model) is rebuilt with one warning; an unwritable directory keeps the index in memory (one warning).
The encoder model is loaded only when something must be embedded or a dense query is made.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from indexer import search as ranking
from indexer.disk import IndexDisk
from indexer.documents import Document, case_documents, case_hash
from indexer.encoder import Encoder
from indexer.lexical import LexicalIndex
from indexer.persist import (
    FORMAT_VERSION,
    LOCK_NAME,
    LOCK_TIMEOUT_S,
    MANIFEST_NAME,
    InvalidStoredIndex,
    StoredIndex,
    read_stored_index,
)
from indexer.query_adapter import QueryAdapter
from indexer.search import EXACT_WINDOW, RRF_K, Hit
from indexer.state import IndexState
from indexer.store import KINDS, StoreKind, VectorStore, choose_kind
from kb.loader import KnowledgeBase
from kb.schema import Case

log = logging.getLogger(__name__)
_stale_adapter_warned: set[str] = set()
# Which query adapter a search uses: the index's own (set_query_adapter), none, or the one given.
AdapterChoice = QueryAdapter | Literal["index", "none"]


@dataclass(frozen=True)
class IndexStats:
    """What the last open/update did; `encoded` counts texts sent to the encoder."""

    action: str  # loaded | built | updated | rebuilt
    cases: int
    documents: int
    encoded: int
    reused: int
    seconds: float
    persisted: bool
    reason: str = ""
    embed_seconds: float = 0.0  # part of `seconds` spent in the encoder


# --------------------------------------------------------------------------------------------------


class KBIndex:
    """Search index over a KnowledgeBase. Build with `KBIndex.open(kb, index_dir, encoder_factory)`."""

    def __init__(self, index_dir: Path, encoder_factory: Callable[[], Encoder], store_kind: str = "auto"):
        if store_kind not in ("auto", *KINDS):
            raise ValueError(f"store_kind must be 'auto', 'flat' or 'hnsw', not {store_kind!r}")
        self.index_dir = Path(index_dir)
        self._encoder_factory = encoder_factory
        self._encoder: Encoder | None = None
        self._store_kind = store_kind
        self._state: IndexState | None = None
        self._disk = IndexDisk(self.index_dir)
        self._embed_seconds = 0.0  # encoder time of the current operation (for IndexStats)
        self._mutex = threading.RLock()  # one mutation at a time; lazy encoder creation
        self._store_lock = threading.Lock()  # faiss: no search while an HNSW graph grows in place
        self._adapter: QueryAdapter | None = None  # maps dense query vectors (indexer.query_adapter)
        self.stats: IndexStats | None = None

    # ---------------------------------------------------------------------------- public API

    @classmethod
    def open(
        cls,
        kb: KnowledgeBase,
        index_dir: Path,
        encoder_factory: Callable[[], Encoder],
        *,
        store_kind: str = "auto",
        force_rebuild: bool = False,
        reread: Callable[[], list[Case]] | None = None,
    ) -> KBIndex:
        """Load the index in `index_dir` for this KB, building or updating it as needed.

        `reread()`, when given, is called once the directory lock is held and returns the newest cases:
        the index is written for the KB as it is then, not as it was when `kb` was read. Another process
        may have added a case in between (20 parallel `kb add`); indexing the older KB would drop it.

        `encoder_factory()` is called once, here; it must be cheap (SentenceTransformerEncoder is: the
        model itself loads on the first encode()). store_kind: "auto" (flat below
        store.HNSW_MIN_VECTORS vectors, HNSW above), "flat" or "hnsw".
        """
        index = cls(index_dir, encoder_factory, store_kind)
        index._sync([case for case in kb.cases], force_rebuild=force_rebuild, reread=reread)
        return index

    @classmethod
    def in_memory(
        cls,
        documents: list[Document],
        vectors: np.ndarray,
        encoder_factory: Callable[[], Encoder],
        *,
        store_kind: str = "auto",
    ) -> KBIndex:
        """An unpersisted index over precomputed vectors (row i = documents[i]; each case's documents
        contiguous). For benchmarks at sizes one cannot embed, and for tests."""
        index = cls(Path("<memory>"), encoder_factory, store_kind)
        index._disk.persistent = False
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(documents):
            raise ValueError(f"{len(documents)} documents but vectors of shape {matrix.shape}")
        store = VectorStore.build(matrix, index._wanted_kind(len(documents)))
        lexical = LexicalIndex.build([d.text for d in documents])
        hashes = {d.case_id: "" for d in documents}
        index._state = IndexState.assemble(list(documents), hashes, store, lexical, index.encoder().model_id)
        return index

    @property
    def model_id(self) -> str:
        return self._state_or_raise().model_id

    @property
    def case_ids(self) -> tuple[str, ...]:
        return self._state_or_raise().case_ids

    @property
    def documents(self) -> tuple[Document, ...]:
        return self._state_or_raise().docs

    @property
    def store_kind(self) -> str:
        return self._state_or_raise().store.kind

    @property
    def persistent(self) -> bool:
        """False when the index lives in memory only (unwritable index_dir)."""
        return self._disk.persistent

    def __len__(self) -> int:
        return len(self._state_or_raise().case_ids)

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._state_or_raise().case_hashes

    @property
    def query_adapter(self) -> QueryAdapter | None:
        return self._adapter

    def set_query_adapter(self, adapter: QueryAdapter | None) -> str:
        """Map dense query vectors with `adapter` from now on (None: plain MiniLM vectors). An adapter for
        another model or dimension is refused: today's dense scores and one warning line, returned too
        ('' when accepted). One trained against another case set is used, with a warning: new cases are
        still scored densely (the documents are not mapped), but `vllm-doctor train` should be rerun."""
        state = self._state_or_raise()
        if adapter is None:
            self._adapter = None
            return ""
        problem = adapter.problem(state.model_id, state.dim)
        if problem:
            self._adapter = None
            message = f"query adapter off, plain dense scores used: {problem}"
            log.warning(message)
            return message
        self._adapter = adapter
        if adapter.stale(state.case_ids):
            message = "query adapter was trained against another set of cases (run `vllm-doctor train`)"
            key = f"{adapter.case_set}:{len(state.case_ids)}"
            if key not in _stale_adapter_warned:  # once per process and case set, not on every KB reload
                _stale_adapter_warned.add(key)
                log.warning(message)
            return message
        return ""

    def document_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """Every document's vector (row order) and the case position of each row (see case_ids)."""
        state = self._state_or_raise()
        with self._store_lock:
            vectors = state.store.reconstruct(list(range(len(state.docs)))) if state.docs else np.zeros(
                (0, state.dim), np.float32)
        return np.asarray(vectors, dtype=np.float32), state.doc_case.copy()

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        """Plain (unadapted) query embeddings, n × dim (for training the query adapter)."""
        return self._encode(queries) if queries else np.zeros((0, self._state_or_raise().dim), np.float32)

    def search(
        self, query: str, k: int = 10, *, adapter: AdapterChoice = "index", vector: np.ndarray | None = None
    ) -> list[Hit]:
        """Cases from both retrievers, both scores filled in (indexer.search.fused). The dense query vector is
        mapped by the query adapter (`adapter`: the index's own by default, "none", or another one: the k-fold
        evaluation). `vector`: the query's plain embedding when the caller already has it (the k-fold reuses
        them)."""
        state = self._state_or_raise()
        if not query.strip() or not state.case_ids or k <= 0:
            return []
        return ranking.fused(state, self._dense_query(query, state, adapter, vector), query, k, self._store_lock)

    def dense_search(self, query: str, k: int = 10, *, adapter: AdapterChoice = "index") -> list[Hit]:
        """Top k cases by embedding similarity only (ablation)."""
        state = self._state_or_raise()
        if not query.strip() or not state.case_ids or k <= 0:
            return []
        return ranking.dense_only(state, self._dense_query(query, state, adapter), k, self._store_lock)

    def lexical_search(self, query: str, k: int = 10) -> list[Hit]:
        """Top k cases by BM25 only (ablation). Never loads the embedding model."""
        state = self._state_or_raise()
        if not query.strip() or not state.case_ids or k <= 0:
            return []
        return ranking.lexical_only(state, query, k)

    def upsert_case(self, case: Case) -> IndexStats:
        """Add a new case or replace a changed one; only its new/changed documents are embedded."""
        with self._mutex:
            state = self._state_or_raise()
            new_docs = case_documents(case)
            if case.id in state.case_hashes:
                pos = state.case_ids.index(case.id)
                rows = state.case_rows(pos)
                docs = [*state.docs[: rows.start], *new_docs, *state.docs[rows.stop :]]
            else:
                docs = [*state.docs, *new_docs]
            hashes = {**state.case_hashes, case.id: case_hash(case)}
            return self._apply(state, docs, hashes, action="updated", reason=f"case {case.id} upserted")

    def remove_case(self, case_id: str) -> IndexStats:
        """Drop a case and its documents. KeyError if the index does not hold it."""
        with self._mutex:
            state = self._state_or_raise()
            if case_id not in state.case_hashes:
                raise KeyError(f"case {case_id!r} is not in the index")
            docs = [d for d in state.docs if d.case_id != case_id]
            hashes = {k: v for k, v in state.case_hashes.items() if k != case_id}
            return self._apply(state, docs, hashes, action="updated", reason=f"case {case_id} removed")

    def rebuild(self) -> IndexStats:
        """Re-embed every document from scratch (e.g. after swapping the model files in place)."""
        with self._mutex:
            state = self._state_or_raise()
            return self._apply(
                state,
                list(state.docs),
                state.case_hashes,
                action="rebuilt",
                reason="rebuild requested",
                reuse=False,
            )

    # ---------------------------------------------------------------------------- search internals

    def _state_or_raise(self) -> IndexState:
        if self._state is None:
            raise RuntimeError("KBIndex is not open; use KBIndex.open(kb, index_dir, encoder_factory)")
        return self._state

    def encoder(self) -> Encoder:
        """The encoder (created on first need; SentenceTransformerEncoder loads its model on first encode)."""
        with self._mutex:
            if self._encoder is None:
                self._encoder = self._encoder_factory()
            return self._encoder

    def _embed_query(self, query: str, state: IndexState) -> np.ndarray:
        vec = self.encoder().encode([query])
        if vec.shape != (1, state.dim):
            raise ValueError(f"encoder returned shape {vec.shape}, index dimension is {state.dim}")
        row: np.ndarray = vec[0]
        return row

    def _dense_query(
        self, query: str, state: IndexState, adapter: AdapterChoice, vector: np.ndarray | None = None
    ) -> np.ndarray:
        """The query's vector for the dense path: embedded, then mapped by the chosen adapter (only the
        query: document vectors stay as stored)."""
        qv = self._embed_query(query, state) if vector is None else np.asarray(vector, dtype=np.float32)
        if qv.shape != (state.dim,):
            raise ValueError(f"query vector of shape {qv.shape}, index dimension is {state.dim}")
        chosen = self._adapter if adapter == "index" else None if adapter == "none" else adapter
        if isinstance(chosen, QueryAdapter) and chosen.dim == qv.shape[0]:
            return chosen.apply(qv)
        return qv

    # ---------------------------------------------------------------------------- building and loading

    def _sync(self, cases: list[Case], force_rebuild: bool, reread: Callable[[], list[Case]] | None = None) -> None:
        """Bring the stored index in line with `cases` (the open() path)."""
        started = time.perf_counter()
        self._embed_seconds = 0.0
        lock = self._disk.acquire_lock()
        try:
            if reread is not None and lock is not None:
                cases = reread()  # the KB version this write is for, read under the lock
            docs_by_case = {case.id: case_documents(case) for case in cases}
            hashes = {case.id: case_hash(case) for case in cases}
            stored: StoredIndex | None = None
            problem = ""
            try:
                stored = read_stored_index(self.index_dir)
            except InvalidStoredIndex as exc:
                problem = str(exc)
            model_id = self.encoder().model_id
            if stored is not None and stored.manifest.get("model_id") != model_id:
                problem = f"was built with model {stored.manifest.get('model_id')}, now {model_id}"
                stored = None
            if force_rebuild:
                problem, stored = "rebuild requested", None
            self._build_from(stored, docs_by_case, [c.id for c in cases], hashes, problem, started)
        finally:
            if lock is not None:
                lock.release()

    def _build_from(
        self,
        stored: StoredIndex | None,
        docs_by_case: dict[str, list[Document]],
        kb_order: list[str],
        hashes: dict[str, str],
        problem: str,
        started: float,
    ) -> None:
        # Layout: stored case order first (so pure additions append rows), then new cases in KB order.
        order = (
            [c for c in dict.fromkeys(d["case"] for d in stored.docs) if c in docs_by_case] if stored else []
        )
        order += [c for c in kb_order if c not in set(order)]
        docs = [d for c in order for d in docs_by_case[c]]
        stored_keys = [(d["case"], d["doc"], d["sha256"]) for d in stored.docs] if stored else []
        new_keys = [(d.case_id, d.name, d.sha256) for d in docs]

        kind = self._wanted_kind(len(docs))
        unchanged = stored is not None and stored_keys == new_keys and stored.store.kind == kind
        if unchanged and stored is not None and stored.lexical is not None:
            state = IndexState.assemble(
                docs,
                hashes,
                stored.store,
                stored.lexical,
                stored.manifest["model_id"],
                stored.manifest.get("generation"),
            )
            if stored.manifest.get("case_hashes") != hashes:
                # cases changed in fields that are not searched (severity, references…): no re-embedding,
                # just record the new hashes so the manifest describes this KB
                log.info("search index: KB metadata changed, documents unchanged; updating the manifest")
                state = self._disk.persist(state)
            self._state = state
            self.stats = IndexStats(
                "loaded", len(order), len(docs), 0, len(docs), time.perf_counter() - started, self._disk.persistent
            )
            return

        reused_vectors: dict[str, np.ndarray] = {}
        if stored is not None:
            vectors = stored.store.vectors()
            for row, entry in enumerate(stored.docs):
                reused_vectors.setdefault(entry["sha256"], vectors[row])
        to_encode = list({d.sha256: d for d in docs if d.sha256 not in reused_vectors}.values())

        # Say once, before the slow part, what is happening and why.
        removed = sorted(set(c for c, _, _ in stored_keys) - set(order)) if stored else []
        if stored is None:
            if problem == "missing":
                message = f"search index: none in {self.index_dir} yet; building it ({len(order)} cases, {len(docs)} documents)"
            else:
                message = f"search index in {self.index_dir} {problem}; rebuilding ({len(order)} cases, {len(docs)} documents)"
        elif unchanged:
            message = (
                f"search index in {self.index_dir}: {stored.lexical_problem}; rebuilt BM25 (no re-embedding)"
            )
        else:
            changed = sorted({d.case_id for d in to_encode})
            parts = []
            if changed:
                parts.append(f"{len(changed)} new/changed case(s)")
            if removed:
                parts.append(f"{len(removed)} removed")
            if stored.store.kind != kind:
                parts.append(f"store {stored.store.kind} → {kind}")
            if stored.lexical is None:
                parts.append(stored.lexical_problem)
            message = (
                f"search index in {self.index_dir} is stale ({', '.join(parts) or 'document order changed'}); "
                f"re-embedding {len(to_encode)} of {len(docs)} documents"
            )
        log.warning(message)

        encoded = self._encode([d.dense_text for d in to_encode])
        for doc, vec in zip(to_encode, encoded, strict=True):
            reused_vectors[doc.sha256] = vec
        dim = int(encoded.shape[1]) if len(encoded) else (stored.store.dim if stored else self.encoder().dim)
        matrix = (
            np.vstack([reused_vectors[d.sha256] for d in docs]) if docs else np.zeros((0, dim), np.float32)
        )

        if stored is not None and stored.store.kind == kind and new_keys[: len(stored_keys)] == stored_keys:
            store = stored.store  # only appended rows: keep the built graph/matrix, add the rest
            store.add(matrix[len(stored_keys) :])
        else:
            store = VectorStore.build(matrix, kind, dim=dim)
        if stored is not None and stored.lexical is not None and stored_keys == new_keys:
            lexical = stored.lexical  # same documents, only the store kind changed
        else:
            lexical = LexicalIndex.build([d.text for d in docs])
        model_id = self.encoder().model_id
        state = IndexState.assemble(docs, hashes, store, lexical, model_id)
        state = self._disk.persist(state)
        self._state = state
        action = "built" if stored is None else "updated"
        self.stats = IndexStats(
            action,
            len(order),
            len(docs),
            len(to_encode),
            len(docs) - len(to_encode),
            time.perf_counter() - started,
            self._disk.persistent,
            problem or message,
            self._embed_seconds,
        )

    def _apply(
        self,
        state: IndexState,
        docs: list[Document],
        hashes: dict[str, str],
        *,
        action: str,
        reason: str,
        reuse: bool = True,
    ) -> IndexStats:
        """Swap in a new document list (upsert/remove/rebuild), embedding only what is new."""
        started = time.perf_counter()
        self._embed_seconds = 0.0
        old_keys = [d.sha256 for d in state.docs]
        old_row: dict[str, int] = {}
        if reuse:
            for row, sha in enumerate(old_keys):
                old_row.setdefault(sha, row)
        to_encode = list({d.sha256: d for d in docs if d.sha256 not in old_row}.values())
        encoded = dict(
            zip([d.sha256 for d in to_encode], self._encode([d.dense_text for d in to_encode]), strict=True)
        )
        kind = self._wanted_kind(len(docs))
        new_keys = [d.sha256 for d in docs]
        empty = np.zeros((0, state.dim), np.float32)
        if reuse and kind == state.store.kind == "hnsw" and new_keys[: len(old_keys)] == old_keys:
            # pure append (a new case) to a graph that takes seconds to rebuild: grow it in place.
            # Searches on the old state skip the new rows (row >= their document count).
            tail = new_keys[len(old_keys) :]
            with self._store_lock:
                known = state.store.reconstruct([old_row[s] for s in tail if s in old_row])
                known_by_sha = dict(zip([s for s in tail if s in old_row], known, strict=True))
                appended = [encoded[s] if s in encoded else known_by_sha[s] for s in tail]
                state.store.add(np.vstack(appended) if appended else empty)
            store = state.store
        else:  # flat: a fresh copy costs milliseconds and never touches the store searches are using
            with self._store_lock:
                old_vectors = state.store.vectors() if old_row else empty
            rows = [encoded[s] if s in encoded else old_vectors[old_row[s]] for s in new_keys]
            store = VectorStore.build(np.vstack(rows) if rows else empty, kind, dim=state.dim)
        lexical = LexicalIndex.build([d.text for d in docs])
        new_state = IndexState.assemble(docs, hashes, store, lexical, state.model_id)
        with self._disk.lock_for_write():
            new_state = self._disk.persist(new_state)
        self._state = new_state
        self.stats = IndexStats(
            action,
            len(new_state.case_ids),
            len(docs),
            len(to_encode),
            len(docs) - len(to_encode),
            time.perf_counter() - started,
            self._disk.persistent,
            reason,
            self._embed_seconds,
        )
        return self.stats

    def _wanted_kind(self, n_docs: int) -> StoreKind:
        return choose_kind(n_docs) if self._store_kind == "auto" else self._store_kind  # type: ignore[return-value]

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        started = time.perf_counter()
        vectors = np.asarray(self.encoder().encode(texts), dtype=np.float32)
        self._embed_seconds += time.perf_counter() - started
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"encoder returned shape {vectors.shape} for {len(texts)} texts")
        return vectors


# Re-exported: callers and tests import these from indexer.index.
__all__ = [
    "EXACT_WINDOW",
    "FORMAT_VERSION",
    "LOCK_NAME",
    "LOCK_TIMEOUT_S",
    "MANIFEST_NAME",
    "RRF_K",
    "Document",
    "Hit",
    "IndexStats",
    "KBIndex",
    "case_documents",
]
