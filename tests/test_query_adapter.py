"""The query adapter (issue 26, indexer/query_adapter.py): a linear map of the dense query embedding trained on
(log, case) pairs. Its gradient, its reproducibility, that the index maps queries only, that a bad artifact
falls back to the plain dense scores with one warning, the stale check, and that the k-fold never trains a
fold's adapter on that fold's logs. Real MiniLM (HF_HUB_OFFLINE=1) on a small copy of the KB."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from indexer_support import CORE_CASES, index_warnings, make_kb, real_encoder

from bot.evaluation.eval_tuning import AdaptedIndex, CachedMatching, LabelledLog, assign_folds
from bot.evaluation.ranker_train import AdapterData, kfold_adapter
from indexer.index import KBIndex
from indexer.query_adapter import (
    AdapterError,
    QueryAdapter,
    case_set_hash,
    load_checked,
    loss_and_grad,
    train,
)

QUERIES = {
    "memory/kv-cache-no-memory": "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.",
    "distributed/nccl-timeout-hang": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
    "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out",
    "cuda/libcudnn-missing": "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
    "serving/port-in-use": "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use",
    "memory/cuda-graph-capture-oom": "torch.OutOfMemoryError during CUDA graph capture: capturing cudagraphs "
    "ran out of memory",
    "distributed/dev-shm-too-small": "Bus error (core dumped) while workers exchange tensors through /dev/shm",
}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[KBIndex, object]:
    root = tmp_path_factory.mktemp("adapter")
    kb = make_kb(root / "cases", [*CORE_CASES[:4], "cuda/libcudnn-missing", "serving/port-in-use"])
    index = KBIndex.open(kb, root / "index", real_encoder)
    return index, kb


def _pairs(index: KBIndex) -> tuple[np.ndarray, list[int]]:
    known = [(case.split("/")[1], text) for case, text in QUERIES.items() if case.split("/")[1] in index]
    assert len(known) >= 4
    vectors = index.embed_queries([text for _, text in known])
    return vectors, [index.case_ids.index(case) for case, _ in known]


# -- the gradient ------------------------------------------------------------------------------------------
def test_the_hand_written_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    d, n_cases = 6, 4
    q = rng.normal(size=(5, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    docs = rng.normal(size=(9, d))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    doc_case = np.array([0, 0, 1, 1, 1, 2, 3, 3, 3])
    y = np.array([0, 1, 2, 3, 1])
    w = np.eye(d) + 0.2 * rng.normal(size=(d, d))
    _, grad = loss_and_grad(w, q, y, docs, doc_case, n_cases, lam=0.05)
    numeric = np.zeros_like(w)
    h = 1e-6
    for i in range(d):
        for j in range(d):
            up, down = w.copy(), w.copy()
            up[i, j] += h
            down[i, j] -= h
            numeric[i, j] = (loss_and_grad(up, q, y, docs, doc_case, n_cases, 0.05)[0]
                             - loss_and_grad(down, q, y, docs, doc_case, n_cases, 0.05)[0]) / (2 * h)
    assert np.abs(grad).max() > 0.1
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


def test_training_is_reproducible_for_a_seed_and_lowers_the_loss(small) -> None:
    index, _ = small
    queries, positions = _pairs(index)
    docs, doc_case = index.document_vectors()
    first = train(queries, positions, docs, doc_case, lam=0.01, steps=40, seed=7)
    again = train(queries, positions, docs, doc_case, lam=0.01, steps=40, seed=7)
    assert np.abs(first.weight - again.weight).max() < 1e-6
    assert first.losses[-1] < first.losses[0] - 0.01
    assert not np.allclose(first.weight, np.eye(first.dim), atol=1e-4)  # it did learn something


# -- the index: queries only; bad artifacts fall back -----------------------------------------------------
def _random_adapter(index: KBIndex, seed: int = 1) -> QueryAdapter:
    rng = np.random.default_rng(seed)
    w = (np.eye(index_dim(index)) + 0.5 * rng.normal(size=(index_dim(index),) * 2)).astype(np.float32)
    return QueryAdapter(w, index.model_id, case_set_hash(index.case_ids))


def index_dim(index: KBIndex) -> int:
    return int(index.document_vectors()[0].shape[1])


def test_the_index_maps_the_query_and_never_the_documents(small) -> None:
    index, _ = small
    adapter = _random_adapter(index)
    query = QUERIES["memory/kv-cache-no-memory"]
    docs_before, doc_case = index.document_vectors()
    plain = {h.case_id: h for h in index.search(query, k=20, adapter="none")}
    adapted = {h.case_id: h for h in index.search(query, k=20, adapter=adapter)}
    np.testing.assert_array_equal(index.document_vectors()[0], docs_before)
    vector = index.embed_queries([query])
    expected = adapter.apply(vector)[0] @ docs_before.T
    unmapped = vector[0] @ docs_before.T
    for pos, case_id in enumerate(index.case_ids):
        best = float(expected[doc_case == pos].max())
        assert adapted[case_id].dense == pytest.approx(best, abs=1e-4)
        plain_best = float(unmapped[doc_case == pos].max())
        assert plain[case_id].dense == pytest.approx(plain_best, abs=1e-4)
    assert any(abs(adapted[c].dense - plain[c].dense) > 1e-3 for c in plain)
    # a plain embedding handed in (the k-fold reuses them) gives the same scores as embedding the query here
    given = index.search(query, k=20, adapter=adapter, vector=vector[0])
    assert [(h.case_id, h.dense) for h in given] == [(h.case_id, h.dense) for h in adapted.values()]
    # BM25 never sees the adapter
    assert {c: h.bm25 for c, h in adapted.items()} == {c: h.bm25 for c, h in plain.items()}
    # the index's own adapter is the default of search()
    assert index.set_query_adapter(adapter) == ""
    try:
        assert [h.dense for h in index.search(query, k=20)] == [h.dense for h in index.search(query, 20, adapter=adapter)]
    finally:
        index.set_query_adapter(None)
    assert [h.dense for h in index.search(query, k=20)] == [h.dense for h in index.search(query, 20, adapter="none")]


@pytest.mark.parametrize("what", ["model", "dimension"])
def test_a_foreign_adapter_gives_the_plain_dense_scores_and_one_warning(small, caplog, what: str) -> None:
    index, _ = small
    good = _random_adapter(index)
    bad = (QueryAdapter(good.weight, "some/other-model", good.case_set) if what == "model"
           else QueryAdapter(np.eye(8, dtype=np.float32), good.model_id, good.case_set))
    query = QUERIES["serving/port-in-use"]
    plain = [(h.case_id, h.dense) for h in index.search(query, k=10, adapter="none")]
    with caplog.at_level(logging.WARNING):
        said = index.set_query_adapter(bad)
    assert "query adapter off" in said and ("other-model" in said or "dimension" in said)
    assert len(index_warnings(caplog.records)) == 1
    assert index.query_adapter is None
    assert [(h.case_id, h.dense) for h in index.search(query, k=10)] == plain


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04broken"])
def test_a_missing_or_damaged_artifact_is_one_line_never_a_crash(tmp_path, content: bytes) -> None:
    path = tmp_path / "query_adapter.npz"
    adapter, said = load_checked(path)
    assert adapter is None and "no query adapter" in said and "\n" not in said
    path.write_bytes(content)
    adapter, said = load_checked(path)
    assert adapter is None and "unreadable" in said and "\n" not in said
    with pytest.raises(AdapterError):
        QueryAdapter.load(path)


def test_the_pipeline_setting_attaches_the_adapter_or_warns(small, tmp_path, caplog) -> None:
    from bot.pipeline import Pipeline
    from bot.settings import Settings

    index, _ = small
    good = tmp_path / "good.npz"
    _random_adapter(index).save(good)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    for path, on in ((good, True), (bad, False)):
        pipeline = Pipeline.from_settings(Settings(index_dir=tmp_path / "ix", kb_db_path=tmp_path / "kb.sqlite3",
                                                   query_adapter="on", query_adapter_path=path))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            pipeline._attach_query_adapter(index)
        try:
            assert (index.query_adapter is not None) is on
            assert bool(caplog.records) is not on  # the good one is silent; the bad one is one line
        finally:
            index.set_query_adapter(None)
    off = Pipeline.from_settings(Settings(index_dir=tmp_path / "ix", kb_db_path=tmp_path / "kb.sqlite3",
                                          query_adapter="off", query_adapter_path=good))
    off._attach_query_adapter(index)
    assert index.query_adapter is None


def test_the_artifact_round_trips_small_and_knows_when_it_is_stale(small, tmp_path, caplog) -> None:
    index, _ = small
    adapter = _random_adapter(index)
    path = tmp_path / "a.npz"
    adapter.save(path)
    assert path.stat().st_size < 1_000_000
    loaded = QueryAdapter.load(path)
    np.testing.assert_array_equal(loaded.weight, adapter.weight)
    assert (loaded.model_id, loaded.dim, loaded.case_set) == (index.model_id, adapter.dim, adapter.case_set)
    assert not loaded.stale(index.case_ids)
    assert not loaded.stale(reversed(index.case_ids))  # a set: order does not matter
    assert loaded.stale([*index.case_ids, "a-new-case"])
    assert loaded.stale(index.case_ids[1:])
    old = QueryAdapter(adapter.weight, adapter.model_id, case_set_hash(index.case_ids[1:]))
    with caplog.at_level(logging.WARNING):
        said = index.set_query_adapter(old)
    try:
        assert "another set of cases" in said and len(index_warnings(caplog.records)) == 1
        assert index.query_adapter is old  # still used: new cases keep dense scores, documents are not mapped
    finally:
        index.set_query_adapter(None)


# -- the k-fold ----------------------------------------------------------------------------------------------
def test_the_kfold_never_trains_a_folds_adapter_on_that_folds_logs(small) -> None:
    from bot.diagnosis.distill import distill

    index, kb = small
    items = [LabelledLog(f"log-{i}", f"{text}\nline {i}", case.split("/")[1], f"https://github.com/o/r{i % 5}/issues/{i}",
                         f"o/r{i % 5}") for i, (case, text) in enumerate(list(QUERIES.items()) * 2)]
    matching = CachedMatching(kb, AdaptedIndex(index, "none"), lambda log: (distill(log), _facts(log)))
    data = AdapterData(matching, index)
    seen: list[list[str]] = []

    def trainer(part):
        adapter, ids = data.train(part, lam=0.01, steps=3)
        seen.append([it.id for it in part])
        assert set(ids) <= {it.id for it in part}
        return adapter, ids

    _, trained_on = kfold_adapter(matching, kb, index, items, trainer, k=3)
    folds = assign_folds(items, 3)
    assert len(trained_on) == 3 == len(seen)
    for f, ids in trained_on.items():
        held = {it.id for it, g in zip(items, folds, strict=True) if g == f}
        others = {it.id for it, g in zip(items, folds, strict=True) if g != f}
        assert set(seen[f]) == others  # the trainer is handed the other folds, all of them
        assert ids and not set(ids) & held
        # every other fold's log of a case in the index, none of this fold's
        assert set(ids) == {it.id for it in items if it.id in others and it.expected in index}


def _facts(log: str):
    from bot.diagnosis.facts import read_facts

    return read_facts(log)


def test_adapter_data_keeps_only_covered_logs_of_cases_in_the_index(small) -> None:
    index, kb = small
    items = [LabelledLog("a", QUERIES["serving/port-in-use"], "port-in-use", "u", "o/a"),
             LabelledLog("b", "some unrelated error", None, "u", "o/b"),
             LabelledLog("c", "another", "no-such-case-here", "u", "o/c")]
    from bot.diagnosis.distill import distill

    matching = CachedMatching(kb, AdaptedIndex(index, "none"), lambda log: (distill(log), _facts(log)))
    ids, queries, positions = AdapterData(matching, index).pairs(items)
    if "port-in-use" in index:
        assert ids == ["a"] and positions == [index.case_ids.index("port-in-use")]
    else:
        assert ids == []


def test_path_constant_points_into_the_kb_package() -> None:
    from indexer.query_adapter import DEFAULT_ARTIFACT

    assert DEFAULT_ARTIFACT.parent == Path(__file__).resolve().parent.parent / "kb" / "ranker"


def test_the_shipped_adapter_is_for_the_bundled_kb_and_the_default_encoder_and_small() -> None:
    from bot.settings import Settings
    from indexer.query_adapter import DEFAULT_ARTIFACT
    from kb.loader import load_kb

    adapter = QueryAdapter.load(DEFAULT_ARTIFACT)
    assert DEFAULT_ARTIFACT.stat().st_size < 1_000_000
    assert not adapter.stale(c.id for c in load_kb().cases), "KB cases changed: run `vllm-doctor train`"
    assert adapter.dim == 384 and adapter.model_id.startswith("all-MiniLM-L6-v2")
    assert adapter.model_id.endswith(":onnx") == (Settings().encoder == "onnx")
    assert adapter.trained_on >= 400


def test_eval_scores_the_logs_the_shipped_adapter_was_trained_on_without_it(doctor) -> None:
    """The shipped adapter learned from dev.jsonl's covered logs: `vllm-doctor eval` on them searches without it
    (else its held-back table would report the adapter's training fit); on a blind round it stays on."""
    from bot.evaluation.eval_tuning import adapter_trained_on
    from bot.evaluation.evaluate import evaluate, format_report, labelled_logs, load_labelled

    eval_dir = Path(__file__).parent / "eval"
    dev = labelled_logs(load_labelled(eval_dir / "dev.jsonl"))
    blind = labelled_logs(load_labelled(eval_dir / "blind.jsonl"))
    adapter = doctor.index.query_adapter
    assert adapter is not None and len(adapter.log_ids) == adapter.trained_on > 0
    assert adapter_trained_on(doctor.index, dev) == adapter.trained_on
    assert adapter_trained_on(doctor.index, blind) == 0

    some = [it for it in dev if it.expected][:12]
    report = evaluate(doctor, some, None, k=2, variants=["clean"], retrievers=False)
    assert report.adapter_off == len(some)
    assert report.matching is not None and isinstance(report.matching.source_index, AdaptedIndex)
    assert report.matching.source_index.adapter == "none"
    assert format_report(report).startswith("query adapter off for this run: it was trained on 12 of these logs")
    assert doctor.index.query_adapter is adapter  # the shared index is left as it was
