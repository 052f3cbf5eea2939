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


ZH_SHARE = 0.3


def chinese_share(text: str) -> float:
    """Share of Chinese characters among letters, code spans left out (commands stay Latin)."""
    prose = _CODE_RE.sub(" ", text)
    cjk = len(_CJK_RE.findall(prose))
    latin = len(_LATIN_RE.findall(prose))
    return cjk / (cjk + latin / 4) if cjk or latin else 0.0  # ~4 Latin letters make one word


def is_language(text: str, lang: Language) -> bool:
    """Whether prose is written in `lang`. Chinese technical prose is full of flags and identifiers, so a
    third of Chinese characters (per word) is enough; English prose has next to none."""
    share = chinese_share(text)
    return share >= ZH_SHARE if lang == "zh" else share < ZH_SHARE


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
    "button.draft_issue": {"en": "Draft a vLLM issue", "zh": "起草 vLLM issue"},
    "draft.posted": {"en": "Draft of a vLLM bug report (nothing was sent; review before posting)",
                     "zh": "vLLM 问题报告草稿（没有发送到任何地方；发布前请检查）"},
    "draft.expired": {"en": "That answer has expired; paste the log again to draft a report.",
                      "zh": "这条回答已过期；请重新粘贴日志再起草报告。"},
    # Slack answer (bot/slack/reply/answer.py); mrkdwn markup stays in the builders
    "slack.head.match": {"en": "Likely cause: {title}", "zh": "最可能的原因：{title}"},
    "slack.head.uncertain": {"en": "Possible cause (not certain): {title}", "zh": "可能的原因（不确定）：{title}"},
    "slack.head.unknown": {"en": "No confident match in the knowledge base", "zh": "知识库中没有可靠的匹配"},
    "slack.head.question.uncertain": {"en": "Several cases may fit your question; the closest: {title}",
                                      "zh": "有几个案例可能相关，最接近的是：{title}"},
    "slack.head.question.unknown": {"en": "No case in the knowledge base fits this question",
                                    "zh": "知识库中没有与这个问题相符的案例"},
    "slack.case_line": {"en": "KB case {case} · {area} · confidence {pct}", "zh": "知识库案例 {case} · {area} · 置信度 {pct}"},
    "slack.evidence": {"en": "Evidence", "zh": "证据"},
    "slack.lines": {"en": "{kept} of {total} lines", "zh": "共 {total} 行，保留 {kept} 行"},
    "slack.question": {"en": "Your question", "zh": "你的问题"},
    "slack.no_error_lines": {"en": "(no error lines found)", "zh": "（没有找到报错行）"},
    "slack.why": {"en": "Why", "zh": "原因"},
    "slack.writing": {"en": "writing…", "zh": "撰写中…"},
    "slack.writing_long": {"en": "Writing a tailored explanation…", "zh": "正在根据你的日志撰写解释…"},
    "slack.fix": {"en": "Fix", "zh": "解决步骤"},
    "slack.more_steps": {"en": "More steps in the KB case.", "zh": "更多步骤见知识库案例。"},
    "slack.also": {"en": "Also possible", "zh": "其他可能"},
    "slack.also_noticed": {"en": "Also noticed (not the cause of this failure)", "zh": "另外注意到（不是这次失败的原因）"},
    "slack.setup": {"en": "What the log says about your setup", "zh": "日志里关于你的部署环境的信息"},
    "slack.candidates": {"en": "Candidates", "zh": "候选案例"},
    "slack.nearest": {"en": "Nearest known cases", "zh": "最接近的已知案例"},
    "slack.nearest_tail": {"en": " (none close enough to trust):", "zh": "（都不够可靠）："},
    "slack.invite": {"en": "Nothing in the knowledge base explains this log yet. If you find the fix, use "
                           "*Add as a KB case* so the next person gets an answer straight away.",
                     "zh": "知识库里暂时没有能解释这段日志的案例。找到解决办法后，请点 *添加为知识库案例*，"
                           "下一位同事就能直接得到答案。"},
    "slack.by_llm": {"en": "Explained by the team's LLM from the KB case; check commands before running them",
                     "zh": "由团队的 LLM 根据知识库案例解释；运行命令前请先检查"},
    "slack.llm_none": {"en": "The LLM found none of the retrieved cases convincing",
                       "zh": "LLM 认为检索到的案例都不太符合"},
    "slack.llm_other": {"en": "The LLM thinks KB case {case} fits better", "zh": "LLM 认为知识库案例 {case} 更符合"},
    "slack.llm_writing": {"en": "The LLM is writing an explanation…", "zh": "LLM 正在撰写解释…"},
    "slack.from_kb": {"en": "From the knowledge base", "zh": "来自知识库"},
    "slack.searched": {"en": "searched in {ms:.0f} ms", "zh": "检索用时 {ms:.0f} ms"},
    "slack.feedback": {"en": "Team feedback on this case: {outcome}", "zh": "团队对此案例的反馈：{outcome}"},
    "slack.placeholder": {"en": "Reading your log and searching the knowledge base…",
                          "zh": "正在阅读日志并检索知识库…"},
    "slack.home.cases": {"en": "*{n}* known failure cases in the knowledge base", "zh": "知识库中有 *{n}* 个已知故障案例"},
    "slack.home.llm_on": {"en": "LLM explanations on", "zh": "LLM 解释已开启"},
    "slack.home.llm_off": {"en": "LLM explanations off (KB-only answers)", "zh": "LLM 解释未开启（仅知识库答案）"},
    "slack.home.runner_on": {"en": "Host diagnostics on", "zh": "主机诊断已开启"},
    "slack.home.runner_off": {"en": "Host diagnostics not configured", "zh": "主机诊断未配置"},
    "slack.home.recent": {"en": "Your recent diagnoses", "zh": "你最近的诊断"},
    "slack.home.empty": {"en": "Nothing yet: paste a log in the Messages tab to try it.",
                         "zh": "还没有记录：在“消息”标签页里贴一段日志或问一个问题试试。"},
    "slack.home.no_match": {"en": "no confident match", "zh": "没有可靠的匹配"},
    "slack.home.ask": {"en": "You can also ask without a log, in English or Chinese: "
                             "\"how do I make decoding faster\", \"多卡推理卡住了怎么办\".",
                       "zh": "也可以不贴日志直接提问（中文或英文）：“多卡推理卡住了怎么办”、“生成太慢了，有什么办法提速”。"},
    "slack.picker.title": {"en": "Run diagnostics", "zh": "运行诊断"},
    "slack.picker.submit": {"en": "Run", "zh": "运行"},
    "slack.picker.cancel": {"en": "Cancel", "zh": "取消"},
    "slack.picker.label": {"en": "Host or group", "zh": "主机或主机组"},
    "slack.picker.hint": {"en": "A host or group from the inventory, e.g. gpu-01 or a100-pool",
                          "zh": "清单中的主机或主机组，例如 gpu-01 或 a100-pool"},
    "slack.host.none": {"en": "no problems found", "zh": "没有发现问题"},
    "slack.host.problems": {"en": "{n} problem(s) found", "zh": "发现 {n} 个问题"},
    "slack.host.counts": {"en": "{hosts} host(s), {checks} checks, {secs:.1f} s",
                          "zh": "{hosts} 台主机，{checks} 项检查，{secs:.1f} 秒"},
    "slack.host.findings": {"en": "Findings", "zh": "发现的问题"},
    "slack.host.cases": {"en": "Known cases these findings point to", "zh": "这些问题对应的已知案例"},
    "slack.host.raw": {"en": "Raw command outputs are in the file in this thread.",
                       "zh": "命令的原始输出在本帖的文件中。"},
    "slack.host.more": {"en": "More in the file below.", "zh": "更多内容见下方文件。"},
    "slack.host.unreachable": {"en": "Could not check the host:", "zh": "无法检查该主机："},
    "slack.host.running": {"en": "Running read-only checks on *{target}*", "zh": "正在对 *{target}* 运行只读检查"},
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
