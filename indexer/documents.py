"""What a KB case becomes in the search index: its documents, and the hashes that say what changed.

Each case is several documents: its `search_text()` followed by its Chinese text ("case"), and each
example log after normalisation ("example:<n>"). BM25 indexes `text` (both languages); MiniLM, which reads
English, embeds `dense_text` (the English text only), so vectors are exactly those of an English-only KB. Vectors are keyed by the sha256 of their document text, so only new or changed documents
are embedded; per-case hashes (and the KB hash over them) say whether the stored index matches the KB.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from indexer.text import normalize_log_text
from kb.schema import Case


@dataclass(frozen=True)
class Document:
    case_id: str
    name: str  # "case" or "example:<n>" (n = 0-based position in case.examples)
    text: str  # what BM25 indexes
    sha256: str  # of `text`; vectors are keyed by it (dense_text is derived from the same case)
    dense_text: str = ""  # what MiniLM embeds; empty = `text`

    def __post_init__(self) -> None:
        if not self.dense_text:
            object.__setattr__(self, "dense_text", self.text)


def case_documents(case: Case) -> list[Document]:
    """The texts that represent one case in the index."""
    english, zh = case.search_text(), case.search_text_zh()
    lexical = english + ("\n" + zh if zh else "")
    # the key covers what is embedded too, so no vector embedded from other text is ever reused for it
    docs = [Document(case.id, "case", lexical, text_sha256(lexical + "\x00" + english), english)]
    for i, ex in enumerate(case.examples):
        text = normalize_log_text(ex.log)
        docs.append(Document(case.id, f"example:{i}", text, text_sha256(text)))
    return docs


def case_hash(case: Case) -> str:
    """Same formula as kb.loader, so a KB reloaded from disk after upsert_case() has the same hash."""
    return hashlib.sha256(case.model_dump_json().encode()).hexdigest()


def kb_content_hash(case_hashes: dict[str, str]) -> str:
    return hashlib.sha256(
        "\n".join(f"{k}:{case_hashes[k]}" for k in sorted(case_hashes)).encode()
    ).hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


__all__ = ["Document", "case_documents", "case_hash", "kb_content_hash", "text_sha256"]
