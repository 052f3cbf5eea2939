"""The index on disk: manifest format, generations of data files, validation on load, the directory lock.

On disk (`index_dir`):
    manifest.json            format version, model id, dimension, KB hash, per-case and per-document
                             hashes, document order, names of the data files below
    vectors-<gen>.faiss      the vector store (row i = document i of the manifest); its sha256 is in the
                             manifest and checked on every open (bytes flipped in place → rebuild)
    bm25-<gen>/              the BM25 index (same rows); sha256 per file in the manifest, checked on open
    .lock                    filelock: one writer at a time; readers hold it for the few ms of loading

The manifest is written last and names its data files, so a crash mid-write leaves the previous index.
What to do when something here fails (rebuild, or keep the index in memory) is KBIndex's decision.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as LockTimeout

from indexer.atomic import atomic_write_text
from indexer.documents import kb_content_hash
from indexer.lexical import TOKENIZER_VERSION, LexicalError, LexicalIndex
from indexer.state import IndexState
from indexer.store import StoreError, VectorStore

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".lock"
# How long open() waits for another process that is building the same index.
LOCK_TIMEOUT_S = 600.0
_GEN_RE = re.compile(r"^(vectors-[0-9a-f]+\.faiss|bm25-[0-9a-f]+)$")


class InvalidStoredIndex(Exception):
    """The stored index cannot be used; the message says why (goes into the one warning line)."""


@dataclass
class StoredIndex:
    manifest: dict[str, Any]
    docs: list[dict[str, str]]  # [{"case": id, "doc": name, "sha256": …}] in row order
    store: VectorStore
    lexical: LexicalIndex | None  # None when the BM25 files are unusable (rebuilt from texts, no re-embed)
    lexical_problem: str = ""


def acquire_directory_lock(index_dir: Path) -> tuple[FileLock | None, str]:
    """(the directory lock, "") or (None, why) when the directory cannot be written: then a valid stored
    index is still read, and the first write that is needed turns the index memory-only (one warning)."""
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(index_dir, os.W_OK):
            raise PermissionError(13, "read-only directory")
        lock = FileLock(str(index_dir / LOCK_NAME), timeout=LOCK_TIMEOUT_S)
        lock.acquire()
        return lock, ""
    except LockTimeout:
        return None, f"another process has held {index_dir / LOCK_NAME} for {LOCK_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return None, f"cannot write to {index_dir} ({exc.strerror or exc})"


def read_stored_index(index_dir: Path) -> StoredIndex:
    """The index in `index_dir`, checked against its manifest. InvalidStoredIndex if it cannot be used;
    unusable BM25 files only set `lexical_problem` (BM25 is rebuilt from texts without re-embedding)."""
    path = index_dir / MANIFEST_NAME
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidStoredIndex("missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidStoredIndex(f"has an unreadable manifest ({exc})") from exc
    try:
        manifest = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidStoredIndex(f"has a corrupt manifest ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(manifest, dict):
        raise InvalidStoredIndex("has a corrupt manifest (not a JSON object)")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidStoredIndex(
            f"has format version {manifest.get('format_version')!r} (this version reads {FORMAT_VERSION})"
        )
    try:
        docs = manifest["documents"]
        dim = int(manifest["dimension"])
        vectors_file = str(manifest["vectors_file"])
        vectors_size = int(manifest["vectors_bytes"])
        bm25_dir = str(manifest["bm25_dir"])
        str(manifest["model_id"])
        if not isinstance(docs, list) or not all(
            isinstance(d, dict) and {"case", "doc", "sha256"} <= d.keys() for d in docs
        ):
            raise TypeError("documents")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidStoredIndex(f"has a corrupt manifest (field {exc})") from exc
    if not _GEN_RE.match(vectors_file) or not _GEN_RE.match(bm25_dir):
        raise InvalidStoredIndex("has a corrupt manifest (bad data file names)")
    vectors_path = index_dir / vectors_file
    try:
        size = vectors_path.stat().st_size
    except OSError:
        raise InvalidStoredIndex(f"is missing its vector file {vectors_file}") from None
    if size != vectors_size:
        raise InvalidStoredIndex(
            f"has a truncated or altered vector file ({size} bytes, manifest says {vectors_size})"
        )
    expected = manifest.get("vectors_sha256")
    if not isinstance(expected, str):
        raise InvalidStoredIndex("has no checksum for its vector file (written by an older version)")
    try:
        actual = file_sha256(vectors_path)
    except OSError as exc:
        raise InvalidStoredIndex(f"has an unreadable vector file ({exc.strerror or exc})") from None
    if actual != expected:
        raise InvalidStoredIndex(f"has a vector file that does not match its checksum ({vectors_file} altered in place)")
    try:
        store = VectorStore.load(vectors_path)
    except StoreError as exc:
        raise InvalidStoredIndex(f"has a corrupt vector file ({exc})") from exc
    if store.dim != dim or len(store) != len(docs):
        raise InvalidStoredIndex(
            f"has vectors of shape ({len(store)}, {store.dim}), manifest expects ({len(docs)}, {dim})"
        )
    lexical: LexicalIndex | None = None
    lexical_problem = ""
    try:
        if manifest.get("tokenizer") != TOKENIZER_VERSION:
            raise LexicalError(f"BM25 built with tokenizer {manifest.get('tokenizer')!r}")
        problem = _bm25_checksum_problem(index_dir / bm25_dir, manifest.get("bm25_sha256"))
        if problem:
            raise LexicalError(problem)
        lexical = LexicalIndex.load(index_dir / bm25_dir)
        if lexical.n_docs != len(docs):
            raise LexicalError(f"BM25 index has {lexical.n_docs} documents, expected {len(docs)}")
    except LexicalError as exc:
        lexical, lexical_problem = None, f"BM25 index unusable ({exc})"
    return StoredIndex(manifest, docs, store, lexical, lexical_problem)


def write_generation(index_dir: Path, state: IndexState) -> str:
    """Write data files under a new generation name, then the manifest (the commit point), then delete
    older generations; return the new generation. Caller holds the directory lock. On OSError the new
    generation's files are removed and the error re-raised (the previous index stays as it was)."""
    generation = f"{time.time_ns():x}{os.getpid():x}"
    vectors_file, bm25_dir = f"vectors-{generation}.faiss", f"bm25-{generation}"
    try:
        size = state.store.save(index_dir / vectors_file)
        state.lexical.save(index_dir / bm25_dir)
        manifest = {
            "format_version": FORMAT_VERSION,
            "model_id": state.model_id,
            "dimension": state.dim,
            "normalisation": "L2-normalised vectors, inner product (cosine)",
            "documents_from": "case.search_text() + indexer.text.normalize_log_text(example.log)",
            "tokenizer": TOKENIZER_VERSION,
            "store_kind": state.store.kind,
            "kb_content_hash": kb_content_hash(state.case_hashes),
            "case_hashes": dict(sorted(state.case_hashes.items())),
            "generation": generation,
            "vectors_file": vectors_file,
            "vectors_bytes": size,
            "vectors_sha256": file_sha256(index_dir / vectors_file),
            "bm25_dir": bm25_dir,
            "bm25_sha256": _dir_sha256(index_dir / bm25_dir),
            "documents": [{"case": d.case_id, "doc": d.name, "sha256": d.sha256} for d in state.docs],
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic_write_text(index_dir / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
    except OSError:
        _remove_paths(index_dir / vectors_file, index_dir / bm25_dir)
        raise
    _remove_paths(
        *(
            p
            for p in index_dir.iterdir()
            if (_GEN_RE.match(p.name) and generation not in p.name) or p.name.endswith(".tmp")
        )
    )
    return generation


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _dir_sha256(directory: Path) -> dict[str, str]:
    return {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file()}


def _bm25_checksum_problem(directory: Path, expected: object) -> str:
    """Why the BM25 files cannot be trusted ("" when they match the manifest's checksums)."""
    if not isinstance(expected, dict):
        return "no checksums in the manifest (written by an older version)"
    try:
        actual = _dir_sha256(directory)
    except OSError as exc:
        return f"cannot read {directory.name} ({exc.strerror or exc})"
    if actual != expected:
        return f"files in {directory.name} do not match their checksums"
    return ""


def _remove_paths(*paths: Path) -> None:
    for p in paths:
        try:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        except OSError:
            pass


__all__ = [
    "FORMAT_VERSION",
    "LOCK_NAME",
    "LOCK_TIMEOUT_S",
    "MANIFEST_NAME",
    "InvalidStoredIndex",
    "StoredIndex",
    "acquire_directory_lock",
    "read_stored_index",
    "write_generation",
]
