"""Checksums in the index manifest: bytes of the vector file flipped in place (same size, NaN vectors) or
of a BM25 file are detected on open and rebuilt with one warning, and dense search is right again."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from indexer_support import CORE_CASES, CountingEncoder, index_warnings, make_kb, real_encoder

from indexer.index import MANIFEST_NAME, KBIndex

QUERY = "ValueError: No available memory for the cache blocks. Try increasing gpu_memory_utilization"
EXPECTED = "kv-cache-no-memory"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("integrity")
    kb = make_kb(root / "cases", CORE_CASES)
    index = KBIndex.open(kb, root / "index", real_encoder)
    assert index.dense_search(QUERY, 1)[0].case_id == EXPECTED
    return kb, root / "index"


@pytest.fixture
def copy(pristine, tmp_path: Path):
    kb, index_dir = pristine
    shutil.copytree(index_dir, tmp_path / "index")
    return kb, tmp_path / "index"


def _manifest(index_dir: Path) -> dict:
    return json.loads((index_dir / MANIFEST_NAME).read_text())


def _flip_vectors_to_nan(path: Path) -> None:
    """Overwrite the tail of the file (the float32 matrix) in place with NaN: same size, same shape."""
    data = bytearray(path.read_bytes())
    nan = struct.pack("<f", float("nan"))
    start = len(data) - 4 * 384 * 5  # the last 5 rows of 384-dim float32 vectors
    data[start:] = nan * (4 * 384 * 5 // 4)
    with open(path, "r+b") as f:  # in place: size and inode unchanged
        f.write(bytes(data))
    assert len(data) == path.stat().st_size


def test_vector_bytes_flipped_in_place_are_detected_and_rebuilt(copy, caplog: pytest.LogCaptureFixture) -> None:
    kb, index_dir = copy
    vectors = index_dir / _manifest(index_dir)["vectors_file"]
    size = vectors.stat().st_size
    _flip_vectors_to_nan(vectors)
    assert vectors.stat().st_size == size  # a size check alone would pass this file
    counter = CountingEncoder(real_encoder())
    caplog.clear()
    index = KBIndex.open(kb, index_dir, lambda: counter)
    warnings = index_warnings(caplog.records)
    assert len(warnings) == 1 and "does not match its checksum" in warnings[0], warnings
    assert index.stats.action == "built"
    assert counter.texts_encoded == len({d.sha256 for d in index.documents})
    hit = index.dense_search(QUERY, 1)[0]
    assert hit.case_id == EXPECTED and hit.dense is not None and np.isfinite(hit.dense)
    caplog.clear()
    again = KBIndex.open(kb, index_dir, real_encoder)
    assert again.stats.action == "loaded" and index_warnings(caplog.records) == []
    assert again.dense_search(QUERY, 1)[0].case_id == EXPECTED


def test_bm25_bytes_flipped_in_place_rebuild_bm25_without_reembedding(copy, caplog: pytest.LogCaptureFixture) -> None:
    kb, index_dir = copy
    bm25 = index_dir / _manifest(index_dir)["bm25_dir"]
    target = max((p for p in bm25.iterdir() if p.suffix == ".npy"), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[-64:] = b"\x00" * 64
    target.write_bytes(bytes(data))
    counter = CountingEncoder(real_encoder())
    caplog.clear()
    index = KBIndex.open(kb, index_dir, lambda: counter)
    warnings = index_warnings(caplog.records)
    assert len(warnings) == 1 and "BM25" in warnings[0] and "checksums" in warnings[0], warnings
    assert counter.calls == []  # nothing re-embedded
    assert index.lexical_search(QUERY, 1)[0].case_id == EXPECTED


def test_manifest_records_the_checksums(pristine) -> None:
    _, index_dir = pristine
    manifest = _manifest(index_dir)
    assert len(manifest["vectors_sha256"]) == 64
    assert set(manifest["bm25_sha256"]) == {p.name for p in (index_dir / manifest["bm25_dir"]).iterdir()}
