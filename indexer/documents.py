"""What a KB case becomes in the search index: its documents, and the hashes that say what changed.

Each case is several documents: its `search_text()` followed by its Chinese text ("case"), and each
example log after normalisation ("example:<n>"). The Chinese text comes last on purpose: MiniLM reads the
first 256 word pieces, which the English text fills for nearly every case, so the vectors stay English
while BM25 sees both languages. Vectors are keyed by the sha256 of their document text, so only new or changed documents
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
    text: str
    sha256: str


def case_documents(case: Case) -> list[Document]:
    """The texts that represent one case in the index."""
    zh = case.search_text_zh()
    texts = [("case", case.search_text() + ("\n" + zh if zh else ""))]
    texts += [(f"example:{i}", normalize_log_text(ex.log)) for i, ex in enumerate(case.examples)]
    return [Document(case.id, name, text, text_sha256(text)) for name, text in texts]


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
