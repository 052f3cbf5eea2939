"""A missing, stale, corrupt or model-mismatched index is rebuilt with one warning, never a crash;
an unwritable index directory keeps the index in memory; concurrent opens do not corrupt it."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import threading
from pathlib import Path

import pytest
from indexer_support import (
    CORE_CASES,
    CountingEncoder,
    index_warnings,
    make_kb,
    real_encoder,
    write_new_case,
)

from indexer.encoder import HashingEncoder, SentenceTransformerEncoder
from indexer.index import MANIFEST_NAME, KBIndex
from kb.loader import load_case_file, load_kb

QUERY = "ValueError: No available memory for the cache blocks"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery")
    kb = make_kb(root / "cases", CORE_CASES)
    KBIndex.open(kb, root / "index", real_encoder)
    return kb, root / "index"


@pytest.fixture()
def damaged(pristine, tmp_path):
    """A private copy of the valid index, to be damaged by the test."""
    kb, index_dir = pristine
    shutil.copytree(index_dir, tmp_path / "index")
    return kb, tmp_path / "index"


def _manifest(index_dir: Path) -> dict:
    return json.loads((index_dir / MANIFEST_NAME).read_text())


def _reopen(kb, index_dir, caplog, encoder=None):
    counter = CountingEncoder(encoder or real_encoder())
    caplog.clear()
    index = KBIndex.open(kb, index_dir, lambda: counter)
    assert index.search(QUERY, 3)[0].case_id == "kv-cache-no-memory"
    return index, counter, index_warnings(caplog.records)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _vectors_file(index_dir: Path) -> Path:
    return index_dir / _manifest(index_dir)["vectors_file"]


def _bm25_dir(index_dir: Path) -> Path:
    return index_dir / _manifest(index_dir)["bm25_dir"]


def _set_manifest(index_dir: Path, **changes) -> None:
    manifest = _manifest(index_dir)
    manifest.update(changes)
    (index_dir / MANIFEST_NAME).write_text(json.dumps(manifest))


# (damage, words expected in the one warning line)
FULL_REBUILDS = {
    "manifest deleted": (lambda d: (d / MANIFEST_NAME).unlink(), "none in"),
    "whole directory missing": (lambda d: shutil.rmtree(d), "none in"),
    "manifest truncated": (lambda d: _truncate(d / MANIFEST_NAME), "corrupt manifest"),
    "manifest not JSON": (lambda d: (d / MANIFEST_NAME).write_text("{not json"), "corrupt manifest"),
    "manifest a list": (lambda d: (d / MANIFEST_NAME).write_text("[1, 2]"), "corrupt manifest"),
    "manifest field missing": (lambda d: _set_manifest(d, documents=None), "corrupt manifest"),
    "manifest from a future version": (lambda d: _set_manifest(d, format_version=99), "format version 99"),
    "vector file truncated": (lambda d: _truncate(_vectors_file(d)), "truncated"),
    "vector file deleted": (lambda d: _vectors_file(d).unlink(), "missing its vector file"),
    "vector file garbage of the right size": (
        lambda d: _vectors_file(d).write_bytes(b"\x07" * _vectors_file(d).stat().st_size),
        "does not match its checksum",
    ),
    "manifest without checksums (older version)": (
        lambda d: _set_manifest(d, vectors_sha256=None), "no checksum for its vector file",
    ),
    "wrong dimension": (lambda d: _set_manifest(d, dimension=123), "shape"),
    "fewer documents than vectors": (
        lambda d: _set_manifest(d, documents=_manifest(d)["documents"][:-1]),
        "shape",
    ),
}


@pytest.mark.parametrize("damage", list(FULL_REBUILDS), ids=list(FULL_REBUILDS))
def test_unusable_index_is_rebuilt_with_one_warning(damaged, caplog, damage):
    kb, index_dir = damaged
    breaker, words = FULL_REBUILDS[damage]
    breaker(index_dir)
    index, counter, warnings = _reopen(kb, index_dir, caplog)
    assert len(warnings) == 1, warnings
    assert words in warnings[0]
    assert index.stats.action == "built"
    assert counter.calls[0] == len({d.sha256 for d in index.documents})  # everything re-embedded
    # and the rebuilt index is valid again: the next open is silent and embeds nothing
    again, counter2, warnings2 = _reopen(kb, index_dir, caplog)
    assert again.stats.action == "loaded" and warnings2 == []
    assert counter2.calls == [1]  # only the query of _reopen's search


@pytest.mark.parametrize(
    "damage",
    ["bm25 dir deleted", "bm25 arrays truncated", "bm25 meta not JSON", "tokenizer changed"],
)
def test_broken_bm25_is_rebuilt_without_reembedding(damaged, caplog, damage):
    kb, index_dir = damaged
    bm25 = _bm25_dir(index_dir)
    if damage == "bm25 dir deleted":
        shutil.rmtree(bm25)
    elif damage == "bm25 arrays truncated":
        for f in bm25.glob("*.npy"):
            _truncate(f)
    elif damage == "bm25 meta not JSON":
        (bm25 / "meta.json").write_text("{")
    else:
        _set_manifest(index_dir, tokenizer="old-tokenizer")
    index, counter, warnings = _reopen(kb, index_dir, caplog)
    assert len(warnings) == 1 and "BM25" in warnings[0], warnings
    assert counter.calls == [1]  # the query only: no document re-embedded
    assert index.lexical_search(QUERY, 1)[0].case_id == "kv-cache-no-memory"
    assert _reopen(kb, index_dir, caplog)[2] == []


def test_model_mismatch_rebuilds_with_the_new_model(damaged, caplog, tmp_path):
    kb, index_dir = damaged
    other_dir = tmp_path / "paraphrase-model"  # same weights under another name = another model id
    other_dir.mkdir()
    default = SentenceTransformerEncoder()
    for f in default.model_path.iterdir():
        (other_dir / f.name).symlink_to(f)
    other = SentenceTransformerEncoder(other_dir)
    index, counter, warnings = _reopen(kb, index_dir, caplog, encoder=other)
    assert len(warnings) == 1 and "was built with model all-MiniLM-L6-v2:" in warnings[0], warnings
    assert other.model_id in warnings[0]
    assert counter.calls[0] == len({d.sha256 for d in index.documents})  # all re-embedded
    assert _manifest(index_dir)["model_id"] == other.model_id


def test_stale_index_after_kb_edit_is_updated_with_one_warning(damaged, caplog, tmp_path):
    kb, index_dir = damaged
    cases = tmp_path / "cases"
    make_kb(cases, CORE_CASES)
    path = cases / "memory" / "cuda-graph-capture-oom.yaml"
    path.write_text(path.read_text().replace("title: ", "title: Start-up fails, ", 1))
    index, counter, warnings = _reopen(load_kb(cases), index_dir, caplog)
    assert len(warnings) == 1 and "stale" in warnings[0] and "re-embedding 1 of" in warnings[0]
    assert counter.calls[0] == 1


def test_force_rebuild(damaged, caplog):
    kb, index_dir = damaged
    counter = CountingEncoder(real_encoder())
    index = KBIndex.open(kb, index_dir, lambda: counter, force_rebuild=True)
    assert index.stats.action == "built"
    assert counter.texts_encoded == len({d.sha256 for d in index.documents})
    assert "rebuild requested" in index_warnings(caplog.records)[0]


def test_leftovers_of_a_crashed_write_are_ignored_and_cleaned(damaged, caplog):
    kb, index_dir = damaged
    (index_dir / ".manifest.json.abc.tmp").write_text("{half")
    (index_dir / "vectors-deadbeef.faiss").write_bytes(b"orphan")
    (index_dir / "bm25-deadbeef").mkdir()
    index, _, warnings = _reopen(kb, index_dir, caplog)
    assert index.stats.action == "loaded" and warnings == []
    index.upsert_case(load_case_file(write_new_case(index_dir.parent / "cases2")))  # a write cleans up
    names = {p.name for p in index_dir.iterdir()}
    assert "vectors-deadbeef.faiss" not in names and "bm25-deadbeef" not in names
    assert not [n for n in names if n.endswith(".tmp")]
    assert sum(n.startswith("vectors-") for n in names) == 1


# ------------------------------------------------------------------------------ unwritable directory


def test_unwritable_index_dir_keeps_index_in_memory_and_warns_once(pristine, tmp_path, caplog):
    kb, _ = pristine
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    index_dir = blocker / "index"  # cannot be created: its parent is a file
    index, counter, warnings = _reopen(kb, index_dir, caplog)
    assert not index.persistent
    assert any("in memory only" in w for w in warnings)
    assert len([w for w in warnings if "in memory only" in w]) == 1
    _, _, warnings2 = _reopen(kb, index_dir, caplog)
    assert not [w for w in warnings2 if "in memory only" in w]  # warned once per directory
    index.upsert_case(kb.cases[0].model_copy(update={"cause": kb.cases[0].cause + " Changed."}))
    assert not index.persistent and not blocker.is_dir()


def test_valid_index_that_cannot_be_locked_is_used_read_only(damaged, caplog):
    """E.g. an index baked into a read-only image: read it as is; warn only when a write is needed."""
    kb, index_dir = damaged
    (index_dir / ".lock").unlink(missing_ok=True)
    (index_dir / ".lock").mkdir()  # the lock file cannot be opened
    before = (index_dir / MANIFEST_NAME).read_text()
    index, counter, warnings = _reopen(kb, index_dir, caplog)
    assert index.stats.action == "loaded" and warnings == [] and counter.calls == [1]
    caplog.clear()
    case = kb.cases[0]
    assert index.upsert_case(case.model_copy(update={"cause": case.cause + " Changed."})).encoded == 1
    assert not index.persistent
    assert [w for w in index_warnings(caplog.records) if "in memory only" in w]
    assert (index_dir / MANIFEST_NAME).read_text() == before


def test_failed_write_falls_back_to_memory(pristine, tmp_path, caplog):
    kb, _ = pristine
    index_dir = tmp_path / "index"
    (index_dir / MANIFEST_NAME).mkdir(parents=True)  # the manifest cannot be replaced by a file
    index, _, warnings = _reopen(kb, index_dir, caplog)
    assert not index.persistent
    assert any("in memory only" in w for w in warnings)
    assert not [p for p in index_dir.iterdir() if p.name.startswith(("vectors-", "bm25-"))]


# ------------------------------------------------------------------------------ concurrency


def _open_in_child(cases_dir: str, index_dir: str, queue) -> None:
    index = KBIndex.open(load_kb(Path(cases_dir)), Path(index_dir), HashingEncoder)
    queue.put((index.stats.action, index.stats.encoded, index.lexical_search(QUERY, 1)[0].case_id))


def test_concurrent_processes_build_once_and_agree(tmp_path):
    make_kb(tmp_path / "cases", CORE_CASES)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_open_in_child, args=(str(tmp_path / "cases"), str(tmp_path / "index"), queue))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    actions = sorted(r[0] for r in results)
    assert actions == ["built", "loaded", "loaded"], results
    assert {r[2] for r in results} == {"kv-cache-no-memory"}
    assert (
        KBIndex.open(load_kb(tmp_path / "cases"), tmp_path / "index", HashingEncoder).stats.action == "loaded"
    )


def test_concurrent_threads_with_the_real_model(pristine, tmp_path):
    kb, _ = pristine
    results, errors = [], []

    def worker():
        try:
            index = KBIndex.open(kb, tmp_path / "index", real_encoder)
            results.append((index.stats.action, index.search(QUERY, 1)[0].case_id))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert sorted(a for a, _ in results) == ["built", "loaded", "loaded"]
    assert {c for _, c in results} == {"kv-cache-no-memory"}


def test_searches_during_upserts_never_fail(pristine, tmp_path):
    kb, index_dir = pristine
    shutil.copytree(index_dir, tmp_path / "index")
    index = KBIndex.open(kb, tmp_path / "index", real_encoder)
    errors, stop = [], threading.Event()

    def searcher():
        while not stop.is_set():
            try:
                assert index.search(QUERY, 3)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    t = threading.Thread(target=searcher)
    t.start()
    try:
        for i in range(4):
            case = kb.cases[i % len(kb.cases)]
            index.upsert_case(case.model_copy(update={"cause": f"{case.cause} Revision {i}."}))
    finally:
        stop.set()
        t.join(timeout=60)
    assert errors == []
