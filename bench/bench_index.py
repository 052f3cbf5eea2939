"""Benchmark the search index: build throughput, add-one-case latency, search latency at scale.

    .venv/bin/python bench/bench_index.py              # everything (several minutes on 2 cores)
    .venv/bin/python bench/bench_index.py --quick      # 1k and 10k synthetic cases only
    .venv/bin/python bench/bench_index.py --sizes 1000,10000,100000 --docs-per-case 3

Real parts: the bundled KB and the real all-MiniLM-L6-v2 for build throughput and for the queries.
Synthetic parts (one cannot embed 100k texts here): vectors are blends of two real KB document vectors
plus Gaussian noise, re-normalised (similarity distribution close to real embeddings, unlike uniform random
vectors); texts are drawn from the KB's own token distribution. Queries are real: root-error lines of the
labelled dev logs, embedded by MiniLM. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from indexer.encoder import SentenceTransformerEncoder  # noqa: E402
from indexer.index import Document, KBIndex, case_documents  # noqa: E402
from indexer.store import VectorStore, set_search_threads  # noqa: E402
from indexer.text import clean_line, mask  # noqa: E402
from kb.loader import load_kb  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000.0, q))


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def real_queries(encoder, limit: int = 40) -> tuple[list[str], np.ndarray]:
    """Root-error-like lines of the labelled dev logs, masked like the pipeline's query."""
    queries = []
    dev = REPO / "tests" / "eval" / "dev.jsonl"
    for line in dev.read_text(encoding="utf-8").splitlines():
        try:
            log = json.loads(line)["log"]
        except (ValueError, KeyError):
            continue
        lines = [mask(clean_line(x)) for x in log.splitlines()]
        lines = [x for x in lines if any(w in x for w in ("Error", "error", "WARN", "failed"))] or lines
        if lines and lines[-1]:
            queries.append(lines[-1][:500])
        if len(queries) >= limit:
            break
    return queries, encoder.encode(queries)


def bench_build(encoder: SentenceTransformerEncoder) -> dict:
    kb = load_kb(strict=False)
    docs = [d for c in kb.cases for d in case_documents(c)]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        index = KBIndex.open(kb, Path(tmp) / "index", lambda: encoder)
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        KBIndex.open(kb, Path(tmp) / "index", lambda: encoder)
        reload_s = time.perf_counter() - t
        # add one case (3 documents) and replace it again: what `kb add` costs
        base = kb.cases[0]
        adds, adds_index_only = [], []
        for i in range(5):
            new = base.model_copy(
                update={
                    "id": f"bench-added-{i}",
                    "title": f"{base.title} variant {i}",
                    "cause": f"{base.cause} Variant {i}.",
                }
            )
            stats = index.upsert_case(new)
            adds.append(stats.seconds)
            adds_index_only.append(stats.seconds - stats.embed_seconds)
        removes = [index.remove_case(f"bench-added-{i}").seconds for i in range(5)]
    texts = [d.text for d in docs]
    t = time.perf_counter()
    encoder.encode(texts)
    encode_s = time.perf_counter() - t
    return {
        "cases": len(kb.cases),
        "documents": len(docs),
        "build_s": build_s,
        "reload_s": reload_s,
        "encode_s": encode_s,
        "add_p50": statistics.median(adds),
        "add_max": max(adds),
        "remove_p50": statistics.median(removes),
        "add_index_p50": statistics.median(adds_index_only),
    }


def synthetic(
    n_cases: int, docs_per_case: int, base_vectors: np.ndarray, vocab: list[str], rng: np.random.Generator
) -> tuple[list[Document], np.ndarray]:
    n = n_cases * docs_per_case
    # a blend of two real document vectors plus a little noise: pairwise cosines median ≈ 0.28, p99 ≈ 0.55,
    # close to the real KB's (0.30 / 0.73); uniform random vectors (cosine ≈ 0) are HNSW's worst case
    # and nothing like text embeddings
    first, second = rng.integers(0, len(base_vectors), n), rng.integers(0, len(base_vectors), n)
    weight = rng.uniform(0, 1, (n, 1)).astype(np.float32)
    vectors = base_vectors[first] + weight * base_vectors[second]
    vectors += 0.045 * rng.standard_normal(vectors.shape).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    lengths = rng.integers(20, 80, n)
    words = rng.integers(0, len(vocab), int(lengths.sum()))
    docs, pos = [], 0
    for row in range(n):
        text = " ".join(vocab[w] for w in words[pos : pos + lengths[row]])
        pos += lengths[row]
        case = row // docs_per_case
        name = "case" if row % docs_per_case == 0 else f"example:{row % docs_per_case - 1}"
        docs.append(Document(f"synthetic-{case}", name, text, ""))
    return docs, vectors.astype(np.float32)


def bench_scale(
    sizes: list[int], docs_per_case: int, encoder, queries: list[str], qvecs: np.ndarray, repeat: int
) -> list[dict]:
    kb = load_kb(strict=False)
    kb_docs = [d for c in kb.cases for d in case_documents(c)]
    base = encoder.encode([d.text for d in kb_docs])
    vocab = [t for d in kb_docs for t in d.text.split()]  # KB token distribution (Zipf-like)
    rng = np.random.default_rng(0)
    rows = []
    for n_cases in sizes:
        docs, vectors = synthetic(n_cases, docs_per_case, base, vocab, rng)
        rows.append(bench_size(n_cases, docs, vectors, encoder, queries, qvecs, repeat))
        print(f"  … {n_cases} cases done", file=sys.stderr, flush=True)
    return rows


def store_latency(store: VectorStore, qvecs: np.ndarray, repeat: int) -> tuple[float, float]:
    samples = [s for q in qvecs for s in timed(lambda q=q: store.search(q, 50), repeat)]
    return pct(samples, 50), pct(samples, 95)


def bench_size(
    n_cases: int,
    docs: list[Document],
    vectors: np.ndarray,
    encoder,
    queries: list[str],
    qvecs: np.ndarray,
    repeat: int,
) -> dict:
    row: dict = {"cases": n_cases, "vectors": len(docs)}
    stores = {}
    for kind in ("flat", "hnsw"):
        t = time.perf_counter()
        stores[kind] = VectorStore.build(vectors, kind)
        row[f"{kind}_build_s"] = time.perf_counter() - t
    exact = [set(stores["flat"].search(q, 10)[1].tolist()) for q in qvecs]
    approx = [set(stores["hnsw"].search(q, 10)[1].tolist()) for q in qvecs]
    row["hnsw_recall10"] = float(np.mean([len(a & e) / 10 for a, e in zip(approx, exact, strict=True)]))
    for kind, store in stores.items():
        for threads in (1, 2):
            set_search_threads(threads)
            row[f"{kind}_t{threads}"] = store_latency(store, qvecs, repeat)
        set_search_threads(1)
    del stores
    # the whole KBIndex (dense + BM25 + per-case max) with the query vectors precomputed, so the numbers
    # show the index, not MiniLM (one query embedding is measured separately)
    table = dict(zip(queries, qvecs, strict=True))
    t = time.perf_counter()
    index = KBIndex.in_memory(docs, vectors, lambda: _Precomputed(encoder, table))
    row["kbindex_build_s"] = time.perf_counter() - t
    row["store_kind"] = index.store_kind
    hybrid = [s for q in queries for s in timed(lambda q=q: index.search(q, 10), repeat)]
    lexical = [s for q in queries for s in timed(lambda q=q: index.lexical_search(q, 10), repeat)]
    row["hybrid"] = (pct(hybrid, 50), pct(hybrid, 95))
    row["bm25"] = (pct(lexical, 50), pct(lexical, 95))
    # add one case (3 documents) at this size: BM25 is rebuilt from all texts, flat copied, HNSW appended
    new_docs = [Document("bench-new", d.name, d.text, f"new-{i}") for i, d in enumerate(docs[:3])]
    table.update({d.text: vectors[i] for i, d in enumerate(docs[:3])})
    t = time.perf_counter()
    index._apply(index._state_or_raise(), [*index.documents, *new_docs], {}, action="updated", reason="bench")
    row["add_one_s"] = time.perf_counter() - t
    return row


class _Precomputed:
    """Encoder that answers known queries from a table (the bench measures the index, not MiniLM)."""

    def __init__(self, real, table: dict[str, np.ndarray]):
        self.real, self.table = real, table

    @property
    def model_id(self) -> str:
        return self.real.model_id

    @property
    def dim(self) -> int:
        return self.real.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self.table[t] for t in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="synthetic KB sizes in cases")
    parser.add_argument(
        "--docs-per-case", type=int, default=3, help="documents per synthetic case (real KB ≈ 3.5)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timings per query")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000 and no build benchmark")
    args = parser.parse_args()
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]

    t = time.perf_counter()
    encoder = SentenceTransformerEncoder()
    encoder.encode(["warm up"])
    cold_load_s = time.perf_counter() - t
    queries, qvecs = real_queries(encoder)
    one_query = timed(lambda: encoder.encode([queries[0]]), 20)

    print(
        f"# Index benchmark — {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at start\n"
    )
    print(
        f"- MiniLM import + load + first encode: {cold_load_s:.1f} s; one query embedding: "
        f"p50 {pct(one_query, 50):.1f} ms, p95 {pct(one_query, 95):.1f} ms\n"
    )
    if not args.quick:
        b = bench_build(encoder)
        print("## Build (bundled KB, real all-MiniLM-L6-v2)\n")
        print(
            "| cases | documents | full build | cases/s | texts/s (build) | texts/s (encode only) | reopen (valid) "
            "| add one case p50 / max | of which not embedding (p50) | remove one case p50 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        print(
            f"| {b['cases']} | {b['documents']} | {b['build_s']:.1f} s | {b['cases'] / b['build_s']:.1f} | "
            f"{b['documents'] / b['build_s']:.1f} | {b['documents'] / b['encode_s']:.1f} | "
            f"{b['reload_s'] * 1000:.0f} ms | {b['add_p50'] * 1000:.0f} / {b['add_max'] * 1000:.0f} ms | "
            f"{b['add_index_p50'] * 1000:.0f} ms | "
            f"{b['remove_p50'] * 1000:.0f} ms |\n"
        )
    rows = bench_scale(sizes, args.docs_per_case, encoder, queries, qvecs, args.repeat)
    print(
        f"## Search latency ({len(queries)} real queries × {args.repeat}; top-50 for stores, top-10 cases "
        f"for KBIndex; {args.docs_per_case} documents per case)\n"
    )
    print(
        "| cases | vectors | flat p50/p95 (1 thr) | flat p50/p95 (2 thr) | HNSW p50/p95 (1 thr) | HNSW p50/p95 (2 thr) "
        "| HNSW build | HNSW recall@10 | KBIndex store | KBIndex.search p50/p95 | BM25 only p50/p95 | add one case |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:

        def f(pair):
            return f"{pair[0]:.2f} / {pair[1]:.2f} ms"

        print(
            f"| {r['cases']:,} | {r['vectors']:,} | {f(r['flat_t1'])} | {f(r['flat_t2'])} | {f(r['hnsw_t1'])} | "
            f"{f(r['hnsw_t2'])} | {r['hnsw_build_s']:.1f} s | {r['hnsw_recall10']:.3f} | {r['store_kind']} | "
            f"{f(r['hybrid'])} | {f(r['bm25'])} | {r['add_one_s'] * 1000:.0f} ms |"
        )


if __name__ == "__main__":
    main()
