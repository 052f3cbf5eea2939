"""Query time: the search over an open index's state (indexer.state.IndexState), read-only.

Each case is several documents (indexer.documents); a case scores the max over its documents. Dense
candidates come from the vector store (indexer.store), lexical ones from BM25 (indexer.lexical); `fused`
returns the union of both top-k lists with both scores filled in exactly. indexer.index.KBIndex owns the
state's lifecycle (open, update, persist) and calls these with the state it holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from indexer.state import IndexState

RRF_K = 60  # reciprocal-rank constant for the default order of search() results
# Up to this many documents a query ranks every document (the real KB); above, the store's top
# candidates (a window of ~4·k·docs-per-case) are aggregated per case. 1024: sorting more costs more than
# the search itself (bench: 0.4 ms vs 1.2 ms per query at 3,000 documents).
EXACT_WINDOW = 1024

# --------------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Hit:
    """One case found by search. Scores are the max over the case's documents.

    dense: cosine similarity in [-1, 1]; bm25: raw BM25 score (≥ 0, unbounded). dense_rank/bm25_rank:
    1-based rank of the case in that retriever's own ranking, None when it is outside that retriever's
    top k (or has no BM25 term in common with the query). In dense_search()/lexical_search() the other
    retriever's fields are None.
    """

    case_id: str
    dense: float | None
    bm25: float | None
    dense_rank: int | None
    bm25_rank: int | None
    best_doc: str  # the document that matched best: "case" or "example:<n>"
    dense_doc: str | None = None
    bm25_doc: str | None = None


# --------------------------------------------------------------------------------------------------
# searches over one state (the caller has checked that the query is not empty and the state has cases)


def fused(state: IndexState, qv: np.ndarray, query: str, k: int, store_lock: threading.Lock) -> list[Hit]:
    """Cases from both retrievers: the union of the dense top k and the BM25 top k (so up to 2k hits),
    each with both scores filled in exactly. Ordered by reciprocal-rank fusion (k=60) as a neutral
    default; callers fuse the scores as they see fit."""
    dense = dense_ranking(state, qv, k, store_lock)
    doc_bm25 = state.lexical.scores(query)
    lexical = _lexical_ranking(state, doc_bm25, k)
    dense_rank = {pos: r for r, pos in enumerate(list(dense)[:k], 1)}
    bm25_rank = {pos: r for r, pos in enumerate(lexical, 1)}
    hits = []
    for pos in dict.fromkeys([*dense_rank, *bm25_rank]):
        d_score, d_row = dense[pos] if pos in dense else exact_dense(state, qv, pos, store_lock)
        b_score, b_row = lexical[pos] if pos in lexical else _case_best(state, doc_bm25, pos)
        d_rank, b_rank = dense_rank.get(pos), bm25_rank.get(pos)
        d_doc = state.docs[d_row].name
        b_doc = state.docs[b_row].name if b_score > 0 else None
        lexical_better = b_rank is not None and (d_rank is None or b_rank < d_rank)
        best = b_doc if lexical_better and b_doc else d_doc
        hits.append(Hit(state.case_ids[pos], d_score, b_score, d_rank, b_rank, best, d_doc, b_doc))
    hits.sort(key=lambda h: (-_rrf(h.dense_rank, h.bm25_rank), -(h.dense or 0.0), h.case_id))
    return hits


def dense_only(state: IndexState, qv: np.ndarray, k: int, store_lock: threading.Lock) -> list[Hit]:
    """Top k cases by embedding similarity only (ablation)."""
    ranking = dense_ranking(state, qv, k, store_lock)
    return [
        Hit(state.case_ids[pos], score, None, rank, None, state.docs[row].name, state.docs[row].name, None)
        for rank, (pos, (score, row)) in enumerate(list(ranking.items())[:k], 1)
    ]


def lexical_only(state: IndexState, query: str, k: int) -> list[Hit]:
    """Top k cases by BM25 only (ablation). Needs no query embedding."""
    ranking = _lexical_ranking(state, state.lexical.scores(query), k)
    return [
        Hit(state.case_ids[pos], None, score, None, rank, state.docs[row].name, None, state.docs[row].name)
        for rank, (pos, (score, row)) in enumerate(ranking.items(), 1)
    ]


def dense_ranking(
    state: IndexState, qv: np.ndarray, k: int, store_lock: threading.Lock
) -> dict[int, tuple[float, int]]:
    """Cases by their best document's cosine, best first: {case position: (score, row)}, at least k
    cases when the index has them. Only the store's candidate window is aggregated (no pass over all
    documents); small indexes (the real KB) put every document in the window. `store_lock`: faiss allows
    no search while an HNSW graph grows in place (KBIndex holds it while it appends)."""
    n_docs = len(state.docs)
    window = n_docs if n_docs <= EXACT_WINDOW else min(n_docs, max(64, 4 * k * state.max_docs_per_case))
    while True:
        with store_lock:
            scores, rows = state.store.search(qv, window)
        keep = rows < n_docs  # rows appended in place for a newer state are not ours
        ranking = _first_per_case(state, scores[keep], rows[keep])
        if window >= n_docs or len(ranking) >= min(k, len(state.case_ids)):
            return ranking
        window = min(n_docs, window * 4)


def exact_dense(state: IndexState, qv: np.ndarray, pos: int, store_lock: threading.Lock) -> tuple[float, int]:
    """Exact best cosine of one case (a BM25 candidate outside the dense window)."""
    rows = state.case_rows(pos)
    with store_lock:
        sims = state.store.reconstruct(list(rows)) @ qv
    best = int(np.argmax(sims))
    return float(sims[best]), rows.start + best


# --------------------------------------------------------------------------------------------------
# ranking helpers: per-case aggregation of per-document scores


def _first_per_case(state: IndexState, scores: np.ndarray, rows: np.ndarray) -> dict[int, tuple[float, int]]:
    """Documents sorted best first → each case's first (= best) document, cases in that order."""
    order = np.lexsort((rows, -scores))  # by score, ties by row: deterministic
    scores, rows = scores[order], rows[order]
    cases = state.doc_case[rows]
    _, first = np.unique(cases, return_index=True)
    first.sort()
    return {int(cases[i]): (float(scores[i]), int(rows[i])) for i in first}


def _lexical_ranking(state: IndexState, doc_scores: np.ndarray, k: int) -> dict[int, tuple[float, int]]:
    """Top k cases by their best document's BM25 score (> 0 only), best first. A case has at most
    max_docs_per_case documents, so the top k × that many documents hold the top k cases."""
    n_docs = len(doc_scores)
    m = min(n_docs, k * state.max_docs_per_case)
    if m <= 0:
        return {}
    rows = np.argpartition(-doc_scores, m - 1)[:m] if m < n_docs else np.arange(n_docs)
    rows = rows[doc_scores[rows] > 0]
    ranking = _first_per_case(state, doc_scores[rows], rows)
    return dict(list(ranking.items())[:k])


def _case_best(state: IndexState, doc_scores: np.ndarray, pos: int) -> tuple[float, int]:
    rows = state.case_rows(pos)
    best = int(np.argmax(doc_scores[rows.start : rows.stop]))
    return float(doc_scores[rows.start + best]), rows.start + best


def _rrf(*ranks: int | None) -> float:
    return sum(1.0 / (RRF_K + r) for r in ranks if r is not None)


__all__ = ["EXACT_WINDOW", "RRF_K", "Hit", "dense_only", "dense_ranking", "exact_dense", "fused", "lexical_only"]
