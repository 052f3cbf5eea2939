"""BM25 over KB documents (bm25s), with a tokenizer that keeps log identifiers whole.

`gpu_memory_utilization`, `NCCL_SOCKET_IFNAME`, `libcudnn.so.8` and `torch._C` are indexed both as one
token and as their parts, so a query naming the exact identifier scores higher than one that only shares
the words. `--max-model-len` and `max_model_len` meet as the same token, and CamelCase exception names
also yield their words (`OutOfMemoryError` → out, of, memory, error). Chinese text is segmented into words
(indexer.segment) next to the Latin tokens, so a mixed paste (a Chinese comment above an English log)
searches with both.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

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


def _english_stopwords() -> frozenset[str]:
    """bm25s's English stop words, read from its stopwords module without importing the package: `import
    bm25s` pulls in scipy (~0.2-0.9 s), and a query needs neither (only building an index does)."""
    spec = importlib.util.find_spec("bm25s")
    if spec is None or spec.origin is None:  # pragma: no cover - a hard dependency
        raise ImportError("bm25s is not installed")
    words_spec = importlib.util.spec_from_file_location(
        "_bm25s_stopwords", Path(spec.origin).with_name("stopwords.py")
    )
    if words_spec is None or words_spec.loader is None:  # pragma: no cover
        raise ImportError("bm25s.stopwords not found")
    module = importlib.util.module_from_spec(words_spec)
    words_spec.loader.exec_module(module)
    return frozenset(module.STOPWORDS_EN)


_STOPWORDS = _english_stopwords()
# The files bm25s writes (and reads back); a stored index is read here with numpy alone.
_ARRAYS = ("data", "indices", "indptr")
_VOCAB_FILE, _PARAMS_FILE = "vocab.index.json", "params.index.json"


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
    """BM25 scores for every document. Row i is document i of the caller's list.

    Built with bm25s (imported only then); held and stored as bm25s's own arrays (per-term posting lists
    of precomputed scores, CSC) and vocabulary, which a query reads with numpy alone."""

    def __init__(
        self,
        postings: dict[str, np.ndarray] | None,
        vocab: dict[str, int] | None,
        params: dict[str, Any] | None,
        n_docs: int,
    ):
        self._postings = postings
        self._vocab = vocab
        self._params = params or {}
        self.n_docs = n_docs

    @classmethod
    def build(cls, texts: list[str]) -> LexicalIndex:
        corpus = [tokenize(t) for t in texts]
        if not any(corpus):  # bm25s cannot index an empty vocabulary
            return cls(None, None, None, len(texts))
        import bm25s

        # bm25s sets its own logger to DEBUG at import, so "Building index from tokens" reached every handler
        # (the CLI's stderr included) whatever the root level; give the application back the say.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        bm25 = bm25s.BM25()
        bm25.index(corpus, show_progress=False)
        with tempfile.TemporaryDirectory(prefix="bm25-") as tmp:  # bm25s's params, exactly as it saves them
            bm25.save(tmp, show_progress=False)
            params = json.loads((Path(tmp) / _PARAMS_FILE).read_text(encoding="utf-8"))
        postings = {name: np.asarray(bm25.scores[name]) for name in _ARRAYS}
        vocab = {str(k): int(v) for k, v in bm25.vocab_dict.items()}
        return cls(postings, vocab, params, len(texts))

    def scores(self, query: str) -> np.ndarray:
        """Raw BM25 score of every document for this query (zeros when no query token is known)."""
        if self._postings is None or self._vocab is None:
            return np.zeros(self.n_docs, dtype=np.float32)
        vocab = self._vocab
        # Each distinct query term counts once: a pasted log repeats "error" dozens of times.
        known = sorted({vocab[t] for t in tokenize(query) if t and t in vocab})
        scores = np.zeros(self.n_docs, dtype=np.float32)
        data, indices, indptr = self._postings["data"], self._postings["indices"], self._postings["indptr"]
        for token_id in known:
            if token_id + 1 >= len(indptr):
                continue  # bm25s's vocabulary ends with the empty token, which has no posting list
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
        """Write into a fresh directory: built in a temp dir next to it, then renamed into place. The files
        are bm25s's (`bm25s.BM25.load` reads them)."""
        directory = Path(directory)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700
            empty = self._postings is None or self._vocab is None
            meta = {"tokenizer": TOKENIZER_VERSION, "n_docs": self.n_docs, "empty": empty}
            if self._postings is not None and self._vocab is not None:
                for name in _ARRAYS:
                    np.save(tmp / f"{name}.csc.index.npy", self._postings[name])
                (tmp / _VOCAB_FILE).write_text(json.dumps(self._vocab, ensure_ascii=False), encoding="utf-8")
                (tmp / _PARAMS_FILE).write_text(json.dumps(self._params, indent=4), encoding="utf-8")
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
                return cls(None, None, None, n_docs)
            postings = {
                name: np.load(directory / f"{name}.csc.index.npy", allow_pickle=False) for name in _ARRAYS
            }
            vocab = json.loads((directory / _VOCAB_FILE).read_text(encoding="utf-8"))
            params = json.loads((directory / _PARAMS_FILE).read_text(encoding="utf-8"))
            if not isinstance(vocab, dict) or not isinstance(params, dict):
                raise TypeError("vocabulary or parameters are not JSON objects")
            stored_docs = int(params["num_docs"])
            indptr, indices, n_postings = postings["indptr"], postings["indices"], len(postings["data"])
            if (
                indices.shape != (n_postings,)
                or indptr.ndim != 1
                or (len(indptr) and int(indptr[-1]) != n_postings)
                or (n_postings and not 0 <= int(indices.min()) <= int(indices.max()) < n_docs)
                or any(not isinstance(v, int) or not 0 <= v < len(indptr) for v in vocab.values())
            ):
                raise ValueError("posting arrays do not fit together")
        except LexicalError:
            raise
        except Exception as exc:  # numpy/json raise many kinds on truncated or garbled files
            raise LexicalError(f"unreadable BM25 index in {directory} ({type(exc).__name__}: {exc})") from exc
        if stored_docs != n_docs:
            raise LexicalError(f"BM25 index holds {stored_docs} documents, metadata says {n_docs}")
        return cls(postings, vocab, params, n_docs)
