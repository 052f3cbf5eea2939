"""BM25 over KB documents (bm25s), with a tokenizer that keeps log identifiers whole.

`gpu_memory_utilization`, `NCCL_SOCKET_IFNAME`, `libcudnn.so.8` and `torch._C` are indexed both as one
token and as their parts, so a query naming the exact identifier scores higher than one that only shares
the words. `--max-model-len` and `max_model_len` meet as the same token, and CamelCase exception names
also yield their words (`OutOfMemoryError` → out, of, memory, error). Chinese text is segmented into words
(indexer.segment) next to the Latin tokens, so a mixed paste (a Chinese comment above an English log)
searches with both.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from indexer.segment import chinese_tokens, vocabulary_version

# Bump when tokenize() changes: stored BM25 indexes built by another version are rebuilt.
# The segmenter's added words are part of the version: a glossary edit rebuilds stored BM25 indexes.
TOKENIZER_VERSION = f"ident-zh-v1-{vocabulary_version()}"

# Placeholders written by indexer.text.mask(); they occur everywhere and say nothing.
_PLACEHOLDER_RE = re.compile(r"<(?:num|hex|path|ip|uuid)>")
# An identifier: word runs joined by '.', '-' (e.g. libcudnn.so.8, torch._C, max-model-len).
_COMPOUND_RE = re.compile(r"[A-Za-z0-9_]+(?:[.\-][A-Za-z0-9_]+)*")
_PART_RE = re.compile(r"[A-Za-z0-9]+")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOPWORDS = frozenset(STOPWORDS_EN)

# bm25s sets its own logger to DEBUG at import, so "Building index from tokens" reached every handler
# (the CLI's stderr included) whatever the root level; give the application back the say.
logging.getLogger("bm25s").setLevel(logging.WARNING)


class LexicalError(Exception):
    """A stored BM25 index is unreadable."""


def tokenize(text: str) -> list[str]:
    """Lower-case tokens: every identifier whole (with '-' folded to '_') plus its parts, then the words of
    any Chinese text."""
    tokens: list[str] = []
    for compound in _COMPOUND_RE.findall(_PLACEHOLDER_RE.sub(" ", text)):
        parts = _PART_RE.findall(compound)
        whole = compound.strip("_.-").lower().replace("-", "_")
        if len(parts) > 1 or whole != (parts[0].lower() if parts else ""):
            if len(whole) > 1:
                tokens.append(whole)
        for part in parts:
            words = _CAMEL_RE.findall(part)
            lowered = part.lower()
            if len(lowered) > 1 and lowered not in _STOPWORDS:
                tokens.append(lowered)
            if len(words) > 1:
                tokens.extend(w.lower() for w in words if len(w) > 1 and w.lower() not in _STOPWORDS)
    tokens.extend(chinese_tokens(text))
    return tokens


class LexicalIndex:
    """BM25 scores for every document. Row i is document i of the caller's list."""

    def __init__(self, bm25: bm25s.BM25 | None, n_docs: int):
        self._bm25 = bm25
        self.n_docs = n_docs

    @classmethod
    def build(cls, texts: list[str]) -> LexicalIndex:
        corpus = [tokenize(t) for t in texts]
        if not any(corpus):  # bm25s cannot index an empty vocabulary
            return cls(None, len(texts))
        bm25 = bm25s.BM25()
        bm25.index(corpus, show_progress=False)
        return cls(bm25, len(texts))

    def scores(self, query: str) -> np.ndarray:
        """Raw BM25 score of every document for this query (zeros when no query token is known)."""
        if self._bm25 is None:
            return np.zeros(self.n_docs, dtype=np.float32)
        vocab = self._bm25.vocab_dict
        # Each distinct query term counts once: a pasted log repeats "error" dozens of times.
        known = sorted({vocab[t] for t in tokenize(query) if t and t in vocab})
        scores = np.zeros(self.n_docs, dtype=np.float32)
        index = self._bm25.scores
        data, indices, indptr = index["data"], index["indices"], index["indptr"]
        for token_id in known:
            start, end = int(indptr[token_id]), int(indptr[token_id + 1])
            # a posting list has each document once, so fancy-index += is exact (and ~20x faster than
            # np.add.at, which bm25s uses)
            scores[indices[start:end]] += data[start:end]
        return scores

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents with a positive score: (scores, row ids), best first."""
        scores = self.scores(query)
        k = min(k, len(scores))
        if k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[scores[top] > 0]
        return scores[top], top.astype(np.int64)

    def save(self, directory: Path) -> None:
        """Write into a fresh directory: built in a temp dir next to it, then renamed into place."""
        directory = Path(directory)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700
            meta = {"tokenizer": TOKENIZER_VERSION, "n_docs": self.n_docs, "empty": self._bm25 is None}
            if self._bm25 is not None:
                self._bm25.save(str(tmp), show_progress=False)
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            os.replace(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(cls, directory: Path) -> LexicalIndex:
        directory = Path(directory)
        try:
            meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
            if meta.get("tokenizer") != TOKENIZER_VERSION:
                raise LexicalError(
                    f"built with tokenizer {meta.get('tokenizer')!r}, now {TOKENIZER_VERSION!r}"
                )
            n_docs = int(meta["n_docs"])
            if meta.get("empty"):
                return cls(None, n_docs)
            bm25 = bm25s.BM25.load(str(directory), show_progress=False)
            stored_docs = int(bm25.scores["num_docs"])
        except LexicalError:
            raise
        except Exception as exc:  # bm25s/numpy/json raise many kinds on truncated or garbled files
            raise LexicalError(f"unreadable BM25 index in {directory} ({type(exc).__name__}: {exc})") from exc
        if stored_docs != n_docs:
            raise LexicalError(f"BM25 index holds {stored_docs} documents, metadata says {n_docs}")
        return cls(bm25, n_docs)
