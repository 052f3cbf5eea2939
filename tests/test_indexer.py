"""KBIndex with the real all-MiniLM-L6-v2: build, reload, retrieval sanity, incremental re-embedding,
HNSW vs flat, lazy model loading. Plumbing of the parts (tokenizer, stores) with no model at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from indexer_support import (
    CORE_CASES,
    EXTRA_CASES,
    CountingEncoder,
    index_warnings,
    make_kb,
    real_encoder,
    write_new_case,
)

from indexer.encoder import EncoderUnavailable, HashingEncoder, SentenceTransformerEncoder
from indexer.index import MANIFEST_NAME, KBIndex
from indexer.lexical import LexicalError, LexicalIndex, tokenize
from indexer.store import StoreError, VectorStore
from indexer.text import normalize_log_text
from kb.loader import KnowledgeBase, load_case_file, load_kb
from kb.schema import Case

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A test KB of real cases and its index, built once with the real model."""
    root = tmp_path_factory.mktemp("indexer")
    kb = make_kb(root / "cases", CORE_CASES + EXTRA_CASES, minimum=8)
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, root / "index", lambda: counter)
    return kb, index, counter, root


# ------------------------------------------------------------------------------ build and reload


def test_first_open_builds_every_document_once(built):
    kb, index, counter, root = built
    n_docs = sum(1 + len(c.examples) for c in kb.cases)
    assert index.stats.action == "built"
    assert index.stats.documents == n_docs
    assert counter.texts_encoded == len({d.sha256 for d in index.documents})
    assert set(index.case_ids) == {c.id for c in kb.cases}
    assert index.persistent


def test_manifest_records_what_built_it(built):
    kb, index, _, root = built
    manifest = json.loads((root / "index" / MANIFEST_NAME).read_text())
    assert manifest["model_id"] == real_encoder().model_id
    assert manifest["model_id"].startswith("all-MiniLM-L6-v2:")
    assert manifest["dimension"] == 384
    assert manifest["kb_content_hash"] == kb.content_hash
    assert manifest["case_hashes"] == kb.case_hashes
    assert [(d["case"], d["doc"]) for d in manifest["documents"]] == [
        (d.case_id, d.name) for d in index.documents
    ]
    assert (root / "index" / manifest["vectors_file"]).stat().st_size == manifest["vectors_bytes"]


def test_reopen_of_a_valid_index_embeds_nothing(built, caplog):
    kb, index, _, root = built
    counter = CountingEncoder(real_encoder())
    again = KBIndex.open(kb, root / "index", lambda: counter)
    assert again.stats.action == "loaded"
    assert counter.calls == []
    assert index_warnings(caplog.records) == []
    # same vectors, same answers
    q = "CUDA out of memory while capturing cuda graphs"
    assert [(h.case_id, round(h.dense, 5)) for h in again.dense_search(q, 5)] == [
        (h.case_id, round(h.dense, 5)) for h in index.dense_search(q, 5)
    ]


# ------------------------------------------------------------------------------ retrieval sanity

# (query, expected case) — paraphrases and real error lines; the expected case must exist in the test KB.
SANITY = [
    (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        "kv-cache-no-memory",
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB during capture_model",
        "cuda-graph-capture-oom",
    ),
    (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds",
        "nccl-timeout-hang",
    ),
    (
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "nccl-unhandled-system-error",
    ),
    (
        "the model's max seq len is larger than the maximum number of tokens that can be stored in KV cache",
        "max-model-len-exceeds-kv-cache",
    ),
    (
        "Free memory on device on startup is less than desired GPU memory utilization",
        "gpu-memory-held-by-other-process",
    ),
]


@pytest.mark.parametrize(("query", "expected"), SANITY, ids=[e for _, e in SANITY])
def test_hybrid_search_ranks_the_right_case_first(built, query, expected):
    _, index, _, _ = built
    hits = index.search(query, k=5)
    assert hits[0].case_id == expected, [(h.case_id, h.dense_rank, h.bm25_rank) for h in hits]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "vllm crashed because the GPU ran out of memory while recording CUDA graphs",
            "cuda-graph-capture-oom",
        ),
        (
            "tensor parallel workers hang forever in an all-reduce until the NCCL watchdog kills them",
            "nccl-timeout-hang",
        ),
        (
            "a leftover process from an earlier run is still using the graphics card memory",
            "gpu-memory-held-by-other-process",
        ),
    ],
)
def test_dense_search_understands_paraphrases(built, query, expected):
    _, index, _, _ = built
    top3 = [h.case_id for h in index.dense_search(query, k=3)]
    assert expected in top3, top3


def test_lexical_search_keeps_identifiers_whole(built):
    _, index, _, _ = built
    hits = index.lexical_search("NCCL_SOCKET_IFNAME", k=5)
    assert hits, "identifier found nowhere"
    nccl_cases = {"nccl-unhandled-system-error", "nccl-socket-interface"}
    assert hits[0].case_id in nccl_cases
    assert all(h.dense is None and h.dense_rank is None for h in hits)
    assert index.lexical_search("zzzqqq_not_a_word", k=5) == []


def test_hit_fields_are_consistent_with_the_ablations(built):
    _, index, _, _ = built
    q = "No available memory for the cache blocks"
    hits = index.search(q, k=3)
    dense = {h.case_id: h for h in index.dense_search(q, k=len(index))}
    lexical = {h.case_id: h for h in index.lexical_search(q, k=len(index))}
    assert 3 <= len(hits) <= 6  # union of two top-3 lists
    for h in hits:
        assert -1.0 <= h.dense <= 1.0 + 1e-6
        assert h.dense == pytest.approx(dense[h.case_id].dense, abs=1e-5)
        assert h.bm25 == pytest.approx(lexical[h.case_id].bm25 if h.case_id in lexical else 0.0, abs=1e-4)
        assert h.dense_rank is None or 1 <= h.dense_rank <= 3
        assert h.best_doc == "case" or h.best_doc.startswith("example:")
        assert h.best_doc in (h.dense_doc, h.bm25_doc)
    by_dense_rank = sorted((h for h in hits if h.dense_rank is not None), key=lambda h: h.dense_rank)
    assert [h.case_id for h in by_dense_rank] == [h.case_id for h in index.dense_search(q, k=3)]
    by_bm25_rank = sorted((h for h in hits if h.bm25_rank is not None), key=lambda h: h.bm25_rank)
    assert [h.case_id for h in by_bm25_rank] == [h.case_id for h in index.lexical_search(q, k=3)]
    assert index.search("   ", k=3) == [] and index.search(q, k=0) == []


def test_best_doc_points_at_the_example_that_matched(built):
    kb, index, _, _ = built
    case = next(c for c in kb.cases if c.id == "nccl-timeout-hang")
    line = next(ln for ln in case.examples[1].log.splitlines() if "Watchdog" in ln or "NCCL" in ln)
    hit = index.dense_search(line, k=1)[0]
    assert hit.case_id == "nccl-timeout-hang"
    assert hit.best_doc.startswith("example:")


# ------------------------------------------------------------------------------ incremental


@pytest.fixture()
def kb_copy(built, tmp_path):
    """A writable copy of the built test KB and its index."""
    _, _, _, root = built
    shutil.copytree(root / "cases", tmp_path / "cases")
    shutil.copytree(root / "index", tmp_path / "index")
    return tmp_path


def test_changed_case_reembeds_only_its_changed_document(kb_copy, caplog):
    path = kb_copy / "cases" / "memory" / "kv-cache-no-memory.yaml"
    text = path.read_text()
    path.write_text(text.replace("cause: >\n", "cause: >\n  The engine stops at start-up. \n", 1))
    kb = load_kb(kb_copy / "cases")
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, kb_copy / "index", lambda: counter)
    assert counter.texts_encoded == 1  # the "case" text; its examples are unchanged
    assert index.stats.action == "updated" and index.stats.encoded == 1
    assert len(index_warnings(caplog.records)) == 1
    assert "re-embedding 1 of" in index_warnings(caplog.records)[0]
    manifest = json.loads((kb_copy / "index" / MANIFEST_NAME).read_text())
    assert manifest["kb_content_hash"] == kb.content_hash


def test_new_and_removed_cases_are_applied_on_open(kb_copy):
    write_new_case(kb_copy / "cases")
    (kb_copy / "cases" / "distributed" / "nccl-timeout-hang.yaml").unlink()
    kb = load_kb(kb_copy / "cases")
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, kb_copy / "index", lambda: counter)
    assert counter.texts_encoded == 3  # the new case: its text + 2 examples
    assert "nccl-timeout-hang" not in index and "test-widget-overheat" in index
    assert (
        index.search("FluxCapacitorThermalTrip widget overheating", k=3)[0].case_id == "test-widget-overheat"
    )
    assert all(
        h.case_id != "nccl-timeout-hang"
        for h in index.search("Watchdog caught collective operation timeout", 10)
    )
    fresh = CountingEncoder(real_encoder())
    again = KBIndex.open(kb, kb_copy / "index", lambda: fresh)
    assert again.stats.action == "loaded" and fresh.calls == []


def test_metadata_only_change_embeds_nothing_but_updates_manifest(kb_copy, caplog):
    path = kb_copy / "cases" / "memory" / "kv-cache-no-memory.yaml"
    path.write_text(path.read_text().replace("severity: high", "severity: critical", 1))
    kb = load_kb(kb_copy / "cases")
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, kb_copy / "index", lambda: counter)
    assert counter.calls == [] and index.stats.action == "loaded"
    assert index_warnings(caplog.records) == []
    assert json.loads((kb_copy / "index" / MANIFEST_NAME).read_text())["kb_content_hash"] == kb.content_hash


def test_upsert_and_remove_case(kb_copy):
    kb = load_kb(kb_copy / "cases")
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, kb_copy / "index", lambda: counter)
    assert counter.calls == []
    new_case = load_case_file(write_new_case(kb_copy / "cases"))
    stats = index.upsert_case(new_case)
    assert stats.encoded == 3 and counter.texts_encoded == 3
    assert index.search("flux capacitor thermal trip on the widget", k=1)[0].case_id == new_case.id
    # the new case is on disk: a process that loads the grown KB embeds nothing
    fresh = CountingEncoder(real_encoder())
    reopened = KBIndex.open(load_kb(kb_copy / "cases"), kb_copy / "index", lambda: fresh)
    assert reopened.stats.action == "loaded" and fresh.calls == []
    # replacing it with one changed example re-embeds one text
    changed = new_case.model_copy(
        update={
            "examples": [
                new_case.examples[0],
                new_case.examples[1].model_copy(update={"log": "FluxCapacitorThermalTrip again, widget 9"}),
            ]
        }
    )
    assert index.upsert_case(changed).encoded == 1
    index.remove_case(new_case.id)
    assert new_case.id not in index
    assert all(h.case_id != new_case.id for h in index.search("FluxCapacitorThermalTrip", 10))
    with pytest.raises(KeyError, match="not in the index"):
        index.remove_case(new_case.id)
    assert index.rebuild().encoded == len({d.sha256 for d in index.documents})


# ------------------------------------------------------------------------------ HNSW vs flat


def test_hnsw_and_flat_agree_on_the_real_index(kb_copy, caplog):
    kb = load_kb(kb_copy / "cases")
    flat = KBIndex.open(kb, kb_copy / "index", real_encoder)
    assert flat.store_kind == "flat"
    hnsw_dir = kb_copy / "index-hnsw"
    shutil.copytree(kb_copy / "index", hnsw_dir)
    counter = CountingEncoder(real_encoder())
    hnsw = KBIndex.open(kb, hnsw_dir, lambda: counter, store_kind="hnsw")
    assert hnsw.store_kind == "hnsw"
    assert counter.calls == []  # switching the store kind reuses the stored vectors
    assert "store flat → hnsw" in index_warnings(caplog.records)[-1]
    for query, _ in SANITY:
        a = [(h.case_id, round(h.dense, 4)) for h in flat.dense_search(query, 5)]
        b = [(h.case_id, round(h.dense, 4)) for h in hnsw.dense_search(query, 5)]
        assert a == b
        assert [h.case_id for h in flat.search(query, 5)] == [h.case_id for h in hnsw.search(query, 5)]


def test_hnsw_recall_against_exact_search():
    rng = np.random.default_rng(7)
    data = rng.standard_normal((5000, 64)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    queries = data[:100] + 0.5 * rng.standard_normal((100, 64)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    flat, hnsw = VectorStore.build(data, "flat"), VectorStore.build(data, "hnsw")
    recall = np.mean([len(set(flat.search(q, 10)[1]) & set(hnsw.search(q, 10)[1])) / 10 for q in queries])
    assert recall >= 0.95
    scores, ids = flat.search(queries[0], 3)
    np.testing.assert_allclose(scores, data[ids] @ queries[0], rtol=1e-5)


def _synthetic_case(i: int) -> Case:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    topic = f"{words[i % 10]} {words[(i * 3) % 10]} {words[(i * 7) % 10]} component{i}"
    return Case.model_validate(
        {
            "id": f"synthetic-{i}",
            "title": f"Synthetic failure {i}",
            "title_zh": "合成",
            "area": "serving",
            "severity": "low",
            "signatures": [f"SyntheticError{i}"],
            "cause": f"Made-up cause about {topic} for tests.",
            "fix": [{"text": f"Restart {topic}."}],
            "examples": [
                {
                    "source": f"https://example.invalid/{i}/{j}",
                    "log": f"SyntheticError{i}: {topic} failed {('at start-up', 'while serving')[j]}",
                }
                for j in range(2)
            ],
            "references": [f"https://example.invalid/{i}/{j}" for j in range(2)],
        }
    )


def test_hnsw_candidate_window_fills_exact_scores(tmp_path, monkeypatch):
    """With more documents than the candidate window, BM25-only candidates still get exact cosines."""
    monkeypatch.setattr("indexer.index.EXACT_WINDOW", 50)
    cases = tuple(_synthetic_case(i) for i in range(60))  # 180 documents > the 64-row window
    kb = KnowledgeBase(cases, "x", {})
    flat = KBIndex.open(kb, tmp_path / "flat", HashingEncoder, store_kind="flat")
    hnsw = KBIndex.open(kb, tmp_path / "hnsw", HashingEncoder, store_kind="hnsw")
    for query in ["SyntheticError7 alpha failed", "component42 hotel", "bravo delta echo"]:
        a = {h.case_id: (round(h.dense, 5), round(h.bm25, 4)) for h in flat.search(query, 3)}
        b = {h.case_id: (round(h.dense, 5), round(h.bm25, 4)) for h in hnsw.search(query, 3)}
        for case_id in a.keys() & b.keys():
            assert a[case_id] == b[case_id]
        assert len(a.keys() & b.keys()) >= min(len(a), len(b)) - 1


# ------------------------------------------------------------------------------ lazy model loading


def test_valid_index_opens_and_searches_lexically_without_torch(built):
    """`kb list`, lint and BM25-only work must not pay for torch: a fresh interpreter proves it."""
    kb, _, _, root = built
    script = textwrap.dedent(
        f"""
        import sys
        from kb.loader import load_kb
        from indexer.index import KBIndex
        from indexer.encoder import SentenceTransformerEncoder
        index = KBIndex.open(load_kb({str(root / "cases")!r}), {str(root / "index")!r}, SentenceTransformerEncoder)
        assert index.stats.action == "loaded", index.stats
        hits = index.lexical_search("Watchdog caught collective operation timeout", 3)
        assert hits[0].case_id == "nccl-timeout-hang", hits
        heavy = [m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules]
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_encoder_model_loads_on_first_dense_query_only(built):
    kb, _, _, root = built
    encoder = SentenceTransformerEncoder()
    index = KBIndex.open(kb, root / "index", lambda: encoder)
    index.lexical_search("gpu_memory_utilization", 3)
    assert not encoder.loaded
    assert encoder.dim == 384  # from the model's config files, still without loading
    assert not encoder.loaded
    index.search("gpu_memory_utilization", 3)
    assert encoder.loaded


def test_encoder_identity_and_errors(tmp_path):
    enc = SentenceTransformerEncoder()
    assert enc.model_id == SentenceTransformerEncoder().model_id  # stable
    other = tmp_path / "my-model"
    other.mkdir()
    for f in enc.model_path.iterdir():  # the same files under another name: another model id
        (other / f.name).symlink_to(f)
    assert SentenceTransformerEncoder(other).model_id.startswith("my-model:")
    assert SentenceTransformerEncoder(other).model_id != enc.model_id
    with pytest.raises(EncoderUnavailable, match="not found: .*nowhere"):
        SentenceTransformerEncoder(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EncoderUnavailable, match="not a sentence-transformers model"):
        SentenceTransformerEncoder(tmp_path / "empty")


def test_real_encoder_output_is_unit_norm_float32():
    vectors = real_encoder().encode(["CUDA error: out of memory", "NCCL WARN socket timeout", ""])
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-5)
    assert real_encoder().encode([]).shape == (0, 384)


# ------------------------------------------------------------------------------ parts, no model


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu_memory_utilization", ["gpu_memory_utilization", "gpu", "memory", "utilization"]),
        ("--gpu-memory-utilization 0.9", ["gpu_memory_utilization", "gpu", "memory", "utilization"]),
        ("export NCCL_SOCKET_IFNAME=eth0", ["nccl_socket_ifname", "nccl", "socket", "ifname", "eth0"]),
        ("libcudnn.so.8: cannot open", ["libcudnn.so.8", "libcudnn", "so", "cannot", "open"]),
        ("No module named 'torch._C'", ["torch._c", "torch", "module", "named"]),
        (
            "torch.OutOfMemoryError",
            ["torch.outofmemoryerror", "torch", "outofmemoryerror", "out", "memory", "error"],
        ),
        ("line <num> in <path>/worker.py", ["worker.py", "worker", "py", "line"]),
    ],
)
def test_tokenizer_keeps_identifiers(text, expected):
    tokens = tokenize(text)
    for token in expected:
        assert token in tokens, (token, tokens)
    assert "num" not in tokens and "path" not in tokens


def test_lexical_index_round_trip_and_corruption(tmp_path):
    texts = [
        "gpu memory utilization too low",
        "NCCL_SOCKET_IFNAME points at the wrong interface",
        "libcudnn.so.8 missing",
    ]
    lexical = LexicalIndex.build(texts)
    lexical.save(tmp_path / "bm25")
    loaded = LexicalIndex.load(tmp_path / "bm25")
    np.testing.assert_allclose(
        loaded.scores("nccl_socket_ifname eth0"), lexical.scores("nccl_socket_ifname eth0")
    )
    assert loaded.search("libcudnn.so.8", 3)[1].tolist() == [2]
    assert LexicalIndex.build(["", "   "]).scores("anything").tolist() == [0.0, 0.0]
    for f in (tmp_path / "bm25").glob("*.npy"):
        f.write_bytes(f.read_bytes()[:20])
    with pytest.raises(LexicalError):
        LexicalIndex.load(tmp_path / "bm25")


def test_vector_store_round_trip_and_corruption(tmp_path):
    vectors = HashingEncoder(64).encode(["alpha beta", "gamma delta", "epsilon"])
    for kind in ("flat", "hnsw"):
        store = VectorStore.build(vectors, kind)
        size = store.save(tmp_path / f"{kind}.faiss")
        assert size == (tmp_path / f"{kind}.faiss").stat().st_size
        loaded = VectorStore.load(tmp_path / f"{kind}.faiss")
        assert loaded.kind == kind and len(loaded) == 3 and loaded.dim == 64
        np.testing.assert_allclose(loaded.vectors(), vectors, atol=1e-6)
        data = (tmp_path / f"{kind}.faiss").read_bytes()
        (tmp_path / "bad.faiss").write_bytes(data[: len(data) // 2])
        with pytest.raises(StoreError):
            VectorStore.load(tmp_path / "bad.faiss")
    with pytest.raises(ValueError, match="unknown vector store kind"):
        VectorStore.empty(8, "ivf")  # type: ignore[arg-type]


def test_hashing_encoder_is_deterministic_and_normalised():
    a, b = HashingEncoder(128).encode(["CUDA out of memory", "CUDA out of memory"])
    np.testing.assert_array_equal(a, b)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)
    assert HashingEncoder(128).model_id != HashingEncoder(64).model_id


def test_open_rejects_an_unknown_store_kind(tmp_path):
    with pytest.raises(ValueError, match="store_kind"):
        KBIndex.open(load_kb(tmp_path), tmp_path / "idx", HashingEncoder, store_kind="ivf")


def test_empty_kb_gives_an_empty_index(tmp_path):
    index = KBIndex.open(load_kb(tmp_path), tmp_path / "idx", HashingEncoder)
    assert len(index) == 0 and index.search("anything") == [] and index.lexical_search("x") == []
    assert KBIndex.open(load_kb(tmp_path), tmp_path / "idx", HashingEncoder).stats.action == "loaded"


def test_hnsw_add_remove_and_reopen(tmp_path):
    cases = tuple(_synthetic_case(i) for i in range(20))
    index = KBIndex.open(KnowledgeBase(cases, "x", {}), tmp_path / "idx", HashingEncoder, store_kind="hnsw")
    new = _synthetic_case(20)
    assert index.upsert_case(new).encoded == 3  # appended to the graph in place
    hit = index.dense_search(normalize_log_text(new.examples[1].log), 1)[0]
    assert (hit.case_id, hit.best_doc, round(hit.dense, 4)) == ("synthetic-20", "example:1", 1.0)
    assert index.lexical_search("component20", 1)[0].case_id == "synthetic-20"
    grown = KnowledgeBase((*cases, new), "y", {})
    assert KBIndex.open(grown, tmp_path / "idx", HashingEncoder, store_kind="hnsw").stats.action == "loaded"
    assert index.remove_case("synthetic-3").encoded == 0  # a removal rebuilds the graph from stored vectors
    assert "synthetic-3" not in {h.case_id for h in index.search(cases[3].examples[0].log, 10)}
    assert index.store_kind == "hnsw"
