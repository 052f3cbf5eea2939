"""Chinese word segmentation for the lexical channel (the only rjieba import).

rjieba (Rust jieba, same dictionary and HMM as jieba) was chosen over jieba: identical words on the
question set, ~10x faster per query and no 0.7 s dictionary load at first use (bench/bench_segment.py,
numbers in README.md). The Chinese glossary terms (kb/glossary.yaml) are added to the dictionary at import,
so "显存不足" or "爆显存" stay one word; search mode also yields their parts ("显存", "不足").
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable
from types import ModuleType

from kb.glossary import default_glossary

_CJK_RUN_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
# Function words and question filler: they say nothing about which failure is meant.
STOPWORDS_ZH = frozenset(
    "的 了 是 在 我 我们 你 你们 他 她 它 就 也 都 和 与 及 或 或者 吗 吗 呢 吧 啊 呀 么 嘛 哦 "
    "怎么 怎么办 怎样 怎么样 如何 什么 为什么 为啥 啥 咋 咋办 一下 这个 那个 这 那 这样 那样 有 "
    "请问 求助 大家 各位 一个 还是 但是 然后 以后 之后 可以 能 能不能 会 要 把 被 给 让 用 时候 时 "
    "问题 报错 错误 出错 部署 运行 跑 遇到 出现 提示 显示 一直 老是 总是 好像 感觉 应该 需要 "
    "到底 是不是 有没有 吧 后 中 里 上 下 个 次 再 又 还 很 太 得 地 着 过 从 对 向 而 并 该 "
    "帮忙 看看 一般 可能 谁 知道 解决 排查 处理 办法 方法".split()
)

_lock = threading.Lock()
_words_added: set[str] = set()
_words_in_order: list[str] = []  # jieba suggests an added word's frequency from the dictionary so far
_segmenter: ModuleType | None = None  # rjieba, imported (~0.3 s, its dictionary) on the first Chinese text


def _rjieba() -> ModuleType:
    global _segmenter
    with _lock:
        if _segmenter is None:
            import rjieba

            for word in _words_in_order:
                rjieba.add_word(word, None, None)
            _segmenter = rjieba
        return _segmenter


def add_words(words: Iterable[str]) -> None:
    """Keep these terms whole when segmenting (idempotent, thread-safe)."""
    with _lock:
        for word in words:
            w = word.strip()
            if w and " " not in w and w not in _words_added and _CJK_RUN_RE.search(w):
                _words_added.add(w)
                _words_in_order.append(w)
                if _segmenter is not None:
                    _segmenter.add_word(w, None, None)


def vocabulary_version() -> str:
    """Short hash of the added words: a stored BM25 index built with other words is rebuilt."""
    with _lock:
        joined = "\n".join(sorted(_words_added))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]


def chinese_tokens(text: str) -> list[str]:
    """Search-mode words of every run of Chinese characters in `text` (other scripts are ignored)."""
    out: list[str] = []
    runs = _CJK_RUN_RE.findall(text)
    if not runs:
        return out  # no Chinese: rjieba is not even imported
    segmenter = _rjieba()
    for run in runs:
        for word in segmenter.cut_for_search(run):
            if word not in STOPWORDS_ZH and _CJK_RUN_RE.fullmatch(word):
                out.append(word)
    return out


add_words(default_glossary().chinese_words())


def has_chinese(text: str) -> bool:
    return bool(_CJK_RUN_RE.search(text))


__all__ = ["STOPWORDS_ZH", "add_words", "chinese_tokens", "has_chinese", "vocabulary_version"]
