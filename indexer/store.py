"""Vector store over unit vectors, scored by inner product (= cosine). The only module that imports faiss.

Two kinds: "flat" (exact, IndexFlatIP) and "hnsw" (approximate graph, IndexHNSWFlat with inner product).
Row numbers are the ids; the caller maps them to documents. `choose_kind()` holds the measured switch-over
point (bench/bench_index.py, docs/indexer.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, cast

import faiss
import numpy as np

from indexer.atomic import atomic_write_bytes

StoreKind = Literal["flat", "hnsw"]
KINDS: tuple[str, ...] = ("flat", "hnsw")

# Measured on 2 cores (bench/bench_index.py, docs/indexer.md): exact search costs ~0.05 ms per 1k vectors
# (≈ 2.5 ms at 50k), HNSW ~0.2-0.6 ms at any size here but takes seconds to build and cannot delete rows.
# Flat below this many vectors, HNSW from here on.
HNSW_MIN_VECTORS = 50_000
HNSW_M = 32  # graph degree; recall@10 ≥ 0.99 on MiniLM-like vectors at efSearch ≥ 64 (bench)
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 96

# One query at a time is latency-bound: OpenMP threads only add spin contention on a busy 2-core host
# (flat search over 30k vectors: 1.4 ms with 1 thread, 15 ms with 2). Concurrency comes from requests.
# Building an HNSW graph is throughput-bound and uses every core (see build()).
faiss.omp_set_num_threads(1)


class StoreError(Exception):
    """A stored vector index is unreadable (truncated, corrupt, wrong kind)."""


def choose_kind(n_vectors: int) -> StoreKind:
    return "hnsw" if n_vectors >= HNSW_MIN_VECTORS else "flat"


def _as_matrix(vectors: np.ndarray, dim: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or (dim is not None and arr.shape[1] != dim):
        raise ValueError(f"expected vectors of shape (n, {dim}), got {vectors.shape}")
    return arr


class VectorStore:
    def __init__(self, index: faiss.Index, kind: StoreKind):
        self._index = index
        self.kind: StoreKind = kind

    @classmethod
    def empty(cls, dim: int, kind: StoreKind = "flat") -> VectorStore:
        index: faiss.Index
        if kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif kind == "hnsw":
            graph = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            graph.hnsw.efSearch = HNSW_EF_SEARCH
            index = graph
        else:
            raise ValueError(f"unknown vector store kind {kind!r}; choose one of {KINDS}")
        return cls(index, kind)

    @classmethod
    def build(cls, vectors: np.ndarray, kind: StoreKind = "flat", dim: int | None = None) -> VectorStore:
        matrix = _as_matrix(vectors, dim)
        store = cls.empty(dim if dim is not None else matrix.shape[1], kind)
        if kind == "hnsw" and len(matrix) > 1000:
            faiss.omp_set_num_threads(os.cpu_count() or 1)
            try:
                store.add(matrix)
            finally:
                faiss.omp_set_num_threads(1)
        else:
            store.add(matrix)
        return store

    @property
    def dim(self) -> int:
        return int(self._index.d)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        matrix = _as_matrix(vectors, self.dim)
        if len(matrix):
            self._index.add(matrix)

    def set_ef_search(self, ef: int) -> None:
        if self.kind == "hnsw":
            # kind "hnsw": an IndexHNSWFlat, from empty() or from deserialize_index (which downcasts)
            cast(faiss.IndexHNSW, self._index).hnsw.efSearch = ef

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows for one query vector: (scores, row ids), best first, at most min(k, len) entries."""
        k = min(k, len(self))
        if k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        scores, ids = self._index.search(_as_matrix(query, self.dim), k)
        keep = ids[0] >= 0  # HNSW may return fewer than k (-1 padding)
        return scores[0][keep], ids[0][keep]

    def reconstruct(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """The stored vectors of these rows."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([self._index.reconstruct(int(i)) for i in ids]).astype(np.float32, copy=False)

    def vectors(self) -> np.ndarray:
        """All stored vectors in row order (both kinds keep the full vectors)."""
        if len(self) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        stored: np.ndarray = self._index.reconstruct_n(0, len(self))  # faiss's stub says Any (a torch overload)
        return stored.astype(np.float32, copy=False)

    def to_bytes(self) -> bytes:
        return faiss.serialize_index(self._index).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> VectorStore:
        try:
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError as exc:  # faiss raises RuntimeError on truncated or garbage input
            raise StoreError(f"unreadable faiss index ({str(exc).splitlines()[0][:200]})") from exc
        if isinstance(index, faiss.IndexHNSWFlat):
            kind: StoreKind = "hnsw"
        elif isinstance(index, faiss.IndexFlatIP):
            kind = "flat"
        else:
            raise StoreError(f"unexpected faiss index type {type(index).__name__}")
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise StoreError("faiss index does not use inner product")
        return cls(index, kind)

    def save(self, path: Path) -> int:
        """Atomically write the index to `path` (temp file + rename). Returns the size in bytes."""
        data = self.to_bytes()
        atomic_write_bytes(Path(path), data)
        return len(data)

    @classmethod
    def load(cls, path: Path) -> VectorStore:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
        return cls.from_bytes(data)


def set_search_threads(n: int) -> None:
    """OpenMP threads faiss may use (process-wide)."""
    faiss.omp_set_num_threads(max(1, n))
