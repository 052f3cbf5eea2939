"""Chinese in the lexical channel: jieba vs rjieba, the cost per query, the cost at index build.

    .venv/bin/python bench/bench_language.py            # everything (a few minutes on 2 cores)
    .venv/bin/python bench/bench_language.py --no-build # skip the index build comparison (MiniLM)

1. Segmenter choice: both segment the Chinese questions of tests/eval/questions.jsonl ('tune' split only:
   the choice is part of tuning). Quality = BM25-only top-1/top-3 of the question matcher's lexical view
   (question + glossary forms) over the cases' bilingual text, with each segmenter; speed = p50 per
   question, and the first call (dictionary load) separately.
2. Query overhead: tokenize() of every question with and without Chinese segmentation (p50 difference).
3. Index build: a fresh KBIndex (real MiniLM) with the bilingual case documents and the segmenting
   tokenizer, against the English-only documents and the old tokenizer (patched in, same code otherwise).
Prints markdown tables. The machine is shared: run it twice and read the spread.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import indexer.documents as documents  # noqa: E402
import indexer.lexical as lexical  # noqa: E402
from bot.diagnosis.question import expand  # noqa: E402
from indexer import segment  # noqa: E402
from kb.glossary import default_glossary  # noqa: E402
from kb.loader import load_kb  # noqa: E402

_STOP = segment.STOPWORDS_ZH


def questions(split: str = "tune") -> list[dict]:
    path = REPO / "tests" / "eval" / "questions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r["split"] == split]


_FIRST_CALL = {
    "jieba": "import jieba, logging; jieba.setLogLevel(logging.WARNING); jieba.lcut('预热')",
    "rjieba": "import rjieba; rjieba.cut('预热')",
}


def first_call_s(name: str) -> float:
    """Import + first segmentation (the dictionary load) in a fresh process, as a CLI run pays it."""
    code = f"import time; t = time.perf_counter(); {_FIRST_CALL[name]}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def jieba_segmenter() -> tuple[Callable[[str], list[str]], float]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    for word in default_glossary().chinese_words():
        jieba.add_word(word)
    init = first_call_s("jieba")

    def cut(run: str) -> list[str]:
        return list(jieba.cut_for_search(run))

    return cut, init


def rjieba_segmenter() -> tuple[Callable[[str], list[str]], float]:
    import rjieba

    return rjieba.cut_for_search, first_call_s("rjieba")  # glossary words were added by indexer.segment at import


def tokenizer_with(cut: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    def chinese_tokens(text: str) -> list[str]:
        out = []
        for run in segment._CJK_RUN_RE.findall(text):
            out += [w for w in cut(run) if w not in _STOP and segment._CJK_RUN_RE.fullmatch(w)]
        return out

    return chinese_tokens


def bm25_quality(chinese_tokens: Callable[[str], list[str]], rows: list[dict]) -> tuple[float, float]:
    kb = load_kb()
    glossary = default_glossary()
    with mock.patch.object(lexical, "chinese_tokens", chinese_tokens):
        texts = [c.search_text() + "\n" + c.search_text_zh() for c in kb.cases]
        index = lexical.LexicalIndex.build(texts)
        top1 = top3 = 0
        for r in rows:
            _, ids = index.search(expand(r["question"], glossary).lexical, 3)
            ranked = [kb.cases[i].id for i in ids]
            top1 += bool(ranked) and ranked[0] in r["expected"]
            top3 += any(c in r["expected"] for c in ranked)
    return top1 / len(rows), top3 / len(rows)


def p50_ms(fn: Callable[[str], object], texts: list[str], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        for text in texts:
            t = time.perf_counter()
            fn(text)
            samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def segmenters() -> None:
    rows = [r for r in questions("tune") if r["language"] == "zh"]
    texts = [r["question"] for r in rows]
    print("| segmenter | import + first call (fresh process) | p50 per question | BM25 top-1 (zh, tune) | BM25 top-3 |")
    print("|---|---|---|---|---|")
    for name, make in (("jieba 0.42.1", jieba_segmenter), ("rjieba 0.2.2", rjieba_segmenter)):
        cut, init = make()
        tokens = tokenizer_with(cut)
        top1, top3 = bm25_quality(tokens, rows)
        print(f"| {name} | {init * 1000:.0f} ms | {p50_ms(tokens, texts):.3f} ms | {top1:.3f} | {top3:.3f} |")
    jcut, _ = jieba_segmenter()
    same = sum(list(jcut(t)) == list(segment.rjieba.cut_for_search(t)) for t in texts)
    print(f"\nidentical segmentation on {same} of {len(texts)} Chinese questions\n")


def query_overhead() -> None:
    texts = [r["question"] for r in questions("tune") + questions("report")]
    with_zh = p50_ms(lexical.tokenize, texts)
    with mock.patch.object(lexical, "chinese_tokens", lambda text: []):
        without = p50_ms(lexical.tokenize, texts)
    print("| tokenize() per question, p50 | without segmentation | with segmentation | added |")
    print("|---|---|---|---|")
    print(f"| {len(texts)} questions × 5 | {without:.3f} ms | {with_zh:.3f} ms | {with_zh - without:.3f} ms |\n")


def build_once(english_only: bool) -> float:
    from indexer.encoder import SentenceTransformerEncoder
    from indexer.index import KBIndex

    kb = load_kb()
    encoder = SentenceTransformerEncoder()
    encoder.encode(["warm up"])  # model load is not index build

    def old_documents(case):  # the documents before Chinese: English case text only
        texts = [("case", case.search_text())]
        texts += [(f"example:{i}", documents.normalize_log_text(ex.log)) for i, ex in enumerate(case.examples)]
        return [documents.Document(case.id, n, t, documents.text_sha256(t)) for n, t in texts]

    patches = [mock.patch("indexer.index.case_documents", old_documents),
               mock.patch.object(lexical, "chinese_tokens", lambda text: [])] if english_only else []
    with tempfile.TemporaryDirectory() as tmp:
        for p in patches:
            p.start()
        try:
            started = time.perf_counter()
            KBIndex.open(kb, Path(tmp), lambda: encoder)
            return time.perf_counter() - started
        finally:
            for p in patches:
                p.stop()


def lexical_build(rounds: int = 5) -> None:
    """The BM25 part of a build alone (no MiniLM): the documents' tokenization is where segmentation costs."""
    kb = load_kb()
    new_docs = [d.text for c in kb.cases for d in documents.case_documents(c)]
    old_docs = [c.search_text() if d.name == "case" else d.text for c in kb.cases for d in documents.case_documents(c)]
    before, after = [], []
    for _ in range(rounds):
        with mock.patch.object(lexical, "chinese_tokens", lambda text: []):
            t = time.perf_counter()
            lexical.LexicalIndex.build(old_docs)
            before.append(time.perf_counter() - t)
        t = time.perf_counter()
        lexical.LexicalIndex.build(new_docs)
        after.append(time.perf_counter() - t)
    b, a = statistics.median(before) * 1000, statistics.median(after) * 1000
    print(f"| BM25 build, {len(new_docs)} documents, median of {rounds} | English only, old tokenizer | "
          "bilingual, segmenting tokenizer | added |")
    print("|---|---|---|---|")
    print(f"| milliseconds | {b:.0f} ms | {a:.0f} ms | {a - b:+.0f} ms |\n")


def index_build(rounds: int) -> None:
    before, after = [], []
    for _ in range(rounds):  # alternate, so load changes on the shared machine hit both alike
        before.append(build_once(english_only=True))
        after.append(build_once(english_only=False))
    b, a = statistics.median(before), statistics.median(after)
    print("| index build (56 cases, real MiniLM), median of", rounds, "| English only, old tokenizer | "
          "bilingual documents, segmenting tokenizer | growth |")
    print("|---|---|---|---|")
    print(f"| seconds | {b:.1f} s | {a:.1f} s | {100 * (a - b) / b:+.0f} % |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    segmenters()
    query_overhead()
    lexical_build()
    if not args.no_build:
        index_build(args.rounds)


if __name__ == "__main__":
    main()
