"""The answer's language: which one (rules below), the fixed words in it, and a case's text in it.

Which language (docs/language.md): an explicit choice (`--lang`, the Slack user's locale) > a forced
setting (VLLM_DOCTOR_LANGUAGE) > the language of the question or of the human text around a log.
A case's Chinese fields may be empty (cases filed from Slack or the CLI): the English text is shown then.
"""

from __future__ import annotations

import re
from typing import Any, Literal

Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")

_CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_RE = re.compile(r"[A-Za-z]")
_CODE_RE = re.compile(r"`[^`]*`")


def as_language(value: str | None) -> Language | None:
    """'zh', 'zh-CN', 'zh_TW' → 'zh'; 'en', 'en-US' → 'en'; anything else → None."""
    if not value:
        return None
    head = value.strip().lower().replace("_", "-").split("-")[0]
    return head if head in LANGUAGES else None  # type: ignore[return-value]


def chinese_share(text: str) -> float:
    """Share of Chinese characters among letters, code spans left out (commands stay Latin)."""
    prose = _CODE_RE.sub(" ", text)
    cjk = len(_CJK_RE.findall(prose))
    latin = len(_LATIN_RE.findall(prose))
    return cjk / (cjk + latin / 4) if cjk or latin else 0.0  # ~4 Latin letters make one word


def is_language(text: str, lang: Language) -> bool:
    """Whether prose is written in `lang`: Chinese needs a clear share of Chinese characters."""
    share = chinese_share(text)
    return share >= 0.5 if lang == "zh" else share < 0.5


# Fixed words of every answer surface (CLI, Slack blocks, notes). Keys say where they are used.
_TEXT: dict[str, dict[Language, str]] = {
    "verdict.match": {"en": "MATCH — a known failure", "zh": "匹配 — 已知故障"},
    "verdict.uncertain": {"en": "UNCERTAIN — possibly a known failure, check the evidence",
                          "zh": "不确定 — 可能是已知故障，请核对证据"},
    "verdict.unknown": {"en": "UNKNOWN — no confident match in the knowledge base",
                        "zh": "未知 — 知识库中没有可靠的匹配"},
    "verdict.question.match": {"en": "MATCH — a known topic", "zh": "匹配 — 已知问题"},
    "verdict.question.uncertain": {"en": "UNCERTAIN — several cases fit your question, see the candidates",
                                   "zh": "不确定 — 有几个案例都可能相关，请看候选"},
    "verdict.question.unknown": {"en": "UNKNOWN — no case in the knowledge base fits this question",
                                 "zh": "未知 — 知识库中没有与这个问题相符的案例"},
    "label.verdict": {"en": "Verdict", "zh": "结论"},
    "label.cause": {"en": "Cause", "zh": "原因"},
    "label.fix": {"en": "Fix", "zh": "解决步骤"},
    "label.why": {"en": "Why", "zh": "原因分析"},
    "label.score": {"en": "score", "zh": "分数"},
    "label.signature": {"en": "signature", "zh": "特征匹配"},
    "label.note": {"en": "note", "zh": "说明"},
    "label.explanation_llm": {"en": "Explanation (LLM)", "zh": "解释（LLM）"},
    "label.explanation_kb": {"en": "Explanation (knowledge base)", "zh": "解释（知识库）"},
    "label.candidates": {"en": "Candidates", "zh": "候选案例"},
    "label.likely": {"en": "Likely cause", "zh": "最可能的原因"},
    "label.possible": {"en": "Possible cause", "zh": "可能的原因"},
    "label.also": {"en": "Also possible", "zh": "其他可能"},
    "label.evidence": {"en": "Evidence", "zh": "证据"},
    "text.no_case": {"en": "No case in the knowledge base resembles this log.",
                     "zh": "知识库中没有与这段日志相似的案例。"},
    "text.no_case_question": {"en": "No case in the knowledge base fits this question.",
                              "zh": "知识库中没有与这个问题相符的案例。"},
    "text.nearest": {"en": "Nearest cases (weak similarity, for reference only):",
                     "zh": "最接近的案例（相似度低，仅供参考）："},
    "text.add_case": {"en": "Nothing matched well enough to name a cause. If you find the fix, add it as a case:",
                      "zh": "没有足够可靠的匹配来确定原因。找到解决办法后，请把它添加为案例："},
    "text.add_case_how": {"en": "  vllm-doctor kb add   (or the \"Add as a KB case\" button in Slack)",
                          "zh": "  vllm-doctor kb add   （或 Slack 中的“添加为知识库案例”按钮）"},
    "text.footer": {"en": "{kept} evidence lines kept of {total}; {ms:.0f} ms",
                    "zh": "共 {total} 行，保留 {kept} 行证据；{ms:.0f} ms"},
    "text.question_footer": {"en": "question without a log; {ms:.0f} ms", "zh": "无日志的提问；{ms:.0f} ms"},
    "text.untranslated": {"en": "", "zh": "（此案例暂无中文内容，显示英文原文）"},
    # notes on KB-only answers (why the LLM did not answer)
    "note.breaker": {
        "en": "LLM skipped after {n} failures in a row (last: {reason}); next try in {retry:.0f} s. "
              "Answer from the knowledge base.",
        "zh": "LLM 已连续失败 {n} 次（最近一次：{reason}），暂时跳过，{retry:.0f} 秒后重试。以下为知识库中的答案。",
    },
    "note.unavailable": {"en": "LLM unavailable ({reason}); answer from the knowledge base.",
                         "zh": "LLM 不可用（{reason}），以下为知识库中的答案。"},
    "note.internal": {"en": "LLM step failed with an internal error (logged); answer from the knowledge base.",
                      "zh": "LLM 步骤发生内部错误（已记录日志），以下为知识库中的答案。"},
    "note.discarded": {"en": "LLM answer discarded: {reason}; answer from the knowledge base.",
                       "zh": "LLM 的回答未通过校验（{reason}），以下为知识库中的答案。"},
    "note.wrong_language": {"en": "the LLM answered in another language",
                            "zh": "LLM 没有用中文回答"},
    # Slack buttons and modals
    "button.fixed": {"en": "Fixed it", "zh": "已解决"},
    "button.not_helpful": {"en": "Didn't help", "zh": "没有帮助"},
    "button.run_diagnostics": {"en": "Run diagnostics on a host", "zh": "在主机上运行诊断"},
    "button.add_case": {"en": "Add as a KB case", "zh": "添加为知识库案例"},
}


def t(key: str, lang: Language, **values: Any) -> str:
    """The fixed text `key` in `lang` (English when a Chinese form is missing)."""
    forms = _TEXT[key]
    text = forms.get(lang) or forms["en"]
    return text.format(**values) if values else text


def case_title(case: Any, lang: Language) -> str:
    return (case.title_zh or case.title) if lang == "zh" else case.title


def case_summary(case: Any, lang: Language) -> str:
    """One-sentence summary: the Chinese summary, or the title (English cases have no summary field)."""
    return (case.summary_zh or case_title(case, lang)) if lang == "zh" else case.title


def case_cause(case: Any, lang: Language) -> str:
    text = case.cause_zh if lang == "zh" and case.cause_zh else case.cause
    return " ".join(text.split())


def step_text(step: Any, lang: Language) -> str:
    text = step.text_zh if lang == "zh" and step.text_zh else step.text
    return " ".join(str(text).split())


def has_chinese_text(case: Any) -> bool:
    return bool(case.cause_zh and all(s.text_zh for s in case.fix))


__all__ = [
    "LANGUAGES",
    "Language",
    "as_language",
    "case_cause",
    "case_summary",
    "case_title",
    "chinese_share",
    "has_chinese_text",
    "is_language",
    "step_text",
    "t",
]
