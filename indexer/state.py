"""IndexState: one immutable in-memory snapshot of the index (documents in row order, the case layout over
those rows, the vector store and the BM25 index). KBIndex replaces it as a whole, so searches never see a
half-updated index."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from indexer.documents import Document
from indexer.lexical import LexicalIndex
from indexer.store import VectorStore


@dataclass(frozen=True)
class IndexState:
    docs: tuple[Document, ...]
    case_ids: tuple[str, ...]  # in row order; each case's documents are contiguous rows
    case_starts: np.ndarray  # row of each case's first document
    doc_case: np.ndarray  # case position of each row
    case_hashes: dict[str, str]
    store: VectorStore
    lexical: LexicalIndex
    model_id: str
    dim: int
    generation: str | None = None  # data-file generation on disk, None when in memory only

    @classmethod
    def assemble(
        cls,
        docs: list[Document],
        case_hashes: dict[str, str],
        store: VectorStore,
        lexical: LexicalIndex,
        model_id: str,
        generation: str | None = None,
    ) -> IndexState:
        case_ids: list[str] = []
        starts: list[int] = []
        doc_case = np.empty(len(docs), dtype=np.int64)
        seen: set[str] = set()
        for row, doc in enumerate(docs):
            if not case_ids or case_ids[-1] != doc.case_id:
                if doc.case_id in seen:
                    raise AssertionError(f"documents of case {doc.case_id} are not contiguous")
                seen.add(doc.case_id)
                case_ids.append(doc.case_id)
                starts.append(row)
            doc_case[row] = len(case_ids) - 1
        return cls(
            tuple(docs),
            tuple(case_ids),
            np.asarray(starts, dtype=np.int64),
            doc_case,
            dict(case_hashes),
            store,
            lexical,
            model_id,
            store.dim,
            generation,
        )

    def case_rows(self, pos: int) -> range:
        end = int(self.case_starts[pos + 1]) if pos + 1 < len(self.case_starts) else len(self.docs)
        return range(int(self.case_starts[pos]), end)

    @cached_property
    def max_docs_per_case(self) -> int:
        if not self.case_ids:
            return 1
        return int(np.diff(np.append(self.case_starts, len(self.docs))).max())


__all__ = ["IndexState"]
