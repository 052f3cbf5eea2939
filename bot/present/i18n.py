"""The answer's language: which one (rules below), the fixed words in it, and a case's text in it.

Which language (docs/language.md): an explicit choice (`--lang`, the Slack user's locale) > a forced
setting (VLLM_DOCTOR_LANGUAGE) > the language of the question or of the human text around a log.
A case's Chinese fields may be empty (cases filed from Slack or the CLI): the English text is shown then.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from bot.models import Language, Note, NoteKind  # the one Language (re-exported for the presentation)

if TYPE_CHECKING:
    from kb.schema import Case

LANGUAGES: tuple[Language, ...] = ("en", "zh")

_CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_RE = re.compile(r"[A-Za-z]")
_CODE_RE = re.compile(r"`[^`]*`")


def as_language(value: str | None) -> Language | None:
    """'zh', 'zh-CN', 'zh_TW' → 'zh'; 'en', 'en-US' → 'en'; anything else → None."""
    if not value:
        return None
    head = value.strip().lower().replace("_", "-").split("-")[0]
    return head if head in LANGUAGES else None


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
    "verdict.question.match": {"en": "MATCH — a known topic", "zh": "匹配 — 已知故障"},
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
    # an LLM-written command that is neither a KB case's nor an allow-listed diagnostic (bot/explain/answer.py)
    "text.unchecked_command": {"en": "⚠ unchecked command written by the LLM: do not run it without reading it",
                               "zh": "⚠ 由 LLM 写出、未经核对的命令：请先读懂，不要直接运行"},
    # notes of the ranking (bot/diagnosis/match.py)
    "note.truncated": {"en": "the paste ends inside a traceback: its final error line is missing, so this is the best "
                             "guess from the frames and facts above it (paste the lines that follow to be sure)",
                       "zh": "粘贴的内容在 traceback 中间就结束了，缺少最后的报错行；这是根据上面的调用栈和日志事实做出的最佳猜测"
                             "（把后面的几行也贴上来才能确认）"},
    "note.truncated_answered": {"en": "the paste ends inside a traceback whose final error line is missing; the answer "
                                      "rests on the error lines and facts before it (paste the lines that follow to "
                                      "check that the traceback is the same failure)",
                                "zh": "粘贴的内容在 traceback 中间就结束了，缺少最后的报错行；这个回答依据的是它前面的报错行和日志事实"
                                      "（把后面的几行也贴上来，确认这段 traceback 是同一个故障）"},
    "note.two_failures": {"en": "two failures: the error on line {line} came first and reads like another problem; "
                                "{case} is matched only after it",
                          "zh": "有两处故障：第 {line} 行的错误先出现，看起来是另一个问题；{case} 只在它之后才匹配到"},
    "note.consequence": {"en": "this is a consequence; the earlier error on line {line} is the cause to fix",
                         "zh": "这是后果；第 {line} 行更早的报错才是要修的原因"},
    "note.consequence_unseen": {"en": "this is a consequence; the paste does not show the earlier root error — paste "
                                      "the lines before it",
                                "zh": "这是后果；粘贴的内容里没有更早的根本报错 — 请把它之前的几行也贴上来"},
    # a case's affects / fixed_in against the versions known for a paste (bot/diagnosis/versions.py); match notes
    "version.where_log": {"en": "this log shows {shown}", "zh": "这段日志显示的是 {shown}"},
    "version.where_host": {"en": "host {host} has {shown}", "zh": "主机 {host} 上是 {shown}"},
    "version.upgrade": {"en": "fixed in {package} {fixed}; {where} — upgrading is the fix",
                        "zh": "已在 {package} {fixed} 中修复；{where} — 升级即可解决"},
    "version.already_fixed": {"en": "fixed in {package} {fixed}; {where}, which already has the fix — "
                                    "look for another cause or a regression",
                              "zh": "已在 {package} {fixed} 中修复；{where}，已包含该修复 — 请排查其他原因或是否为回归问题"},
    "version.inside": {"en": "known in {package} {spec}; {where}, inside that range",
                       "zh": "已知影响 {package} {spec}；{where}，在此范围内"},
    "version.outside": {"en": "known in {package} {spec}; {where}, outside that range",
                        "zh": "已知影响 {package} {spec}；{where}，不在此范围内"},
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
    "slack.head.uncovered": {"en": "No known case covers this failure", "zh": "没有已知故障案例覆盖这个问题"},
    "slack.draft_pointer": {"en": "A bug-report draft from this log: the *Draft a vLLM issue* button below (nothing is sent).",
                            "zh": "根据这段日志生成问题报告草稿：点击下方的 *起草 vLLM issue* 按钮（不会发送到任何地方）。"},
    "slack.root": {"en": "The error to fix", "zh": "需要修复的错误"},
    "slack.root_checks": {"en": "Run the {component} checks on a host", "zh": "在主机上运行 {component} 检查"},
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
    "slack.host.running_many": {"en": " ({n} hosts: {shown})", "zh": "（{n} 台主机：{shown}）"},
    "slack.host.and_more": {"en": " and {n} more", "zh": " 等另外 {n} 台"},
    "slack.host.running_fallback": {"en": "Running checks on {target}…", "zh": "正在检查 {target}…"},
    "slack.host.no_checks": {"en": "no checks ran", "zh": "没有运行任何检查"},
    "slack.host.more_hosts": {"en": "{n} more hosts in the file below", "zh": "另外 {n} 台主机见下方文件"},
    "slack.host.raw_title": {"en": "Raw check outputs: {target}", "zh": "检查命令原始输出：{target}"},
    "slack.host.not_configured": {
        "en": "Host diagnostics are not configured on this bot yet. Once an admin sets up the host inventory and SSH "
              "access (VLLM_DOCTOR_INVENTORY, see docs/slack.md), this runs the read-only check catalogue on the host "
              "and posts the results here.",
        "zh": "这个机器人还没有配置主机诊断。管理员配置好主机清单和 SSH 访问（VLLM_DOCTOR_INVENTORY，见 docs/slack.md）后，"
              "这里会在主机上运行只读检查目录，并把结果发到这里。"},
    "slack.host.you_may": {"en": "Hosts and groups you may diagnose here: {shown}",
                           "zh": "你在这里可以诊断的主机和主机组：{shown}"},
    "slack.picker.empty": {"en": "Type a host or group name.", "zh": "请输入主机名或主机组名。"},
    # /vllm-diagnose help (bot/slack/blocks.help_message); mrkdwn markup is part of the text
    "slack.help.title": {"en": "How to use vLLM Doctor", "zh": "vLLM Doctor 使用说明"},
    "slack.help.body": {
        "en": """*vLLM Doctor* reads vLLM error logs and tells you the likely cause and the fix, from the team's knowledge base (and the team's LLM when configured).

*Ask about a log*
• Paste a log in a DM to me, or mention me with it: `@vLLM Doctor <log>` (works in threads too)
• Mention me with nothing else in the thread of a pasted log to diagnose that log
• `/vllm-explain <log>` in any channel I am in
• Upload the log as a file or snippet in a DM or with a mention (text files up to {max_mb} MB)
• On any message: *⋮ More actions → Diagnose this message*
{watch}
*Check a GPU host*
• `/vllm-diagnose <host or group> [check …]` or `/vllm-diagnose <host> tier <N>`
• `@vLLM Doctor diagnose <host>` inside a thread
{runner}
*On every answer*
• *Fixed it* / *Didn't help* tell the team whether the KB case worked
• *Run diagnostics on a host* and *Add as a KB case*
""",
        "zh": """*vLLM Doctor* 读取 vLLM 报错日志，根据团队的知识库（以及配置好的团队 LLM）告诉你最可能的原因和解决办法。也可以不贴日志，直接用中文或英文提问。

*询问一段日志*
• 私信给我贴日志，或者带着日志 @ 我：`@vLLM Doctor <日志>`（在帖子里也可以）
• 在贴过日志的帖子里只 @ 我，我就诊断那段日志
• 在我所在的任何频道使用 `/vllm-explain <日志>`
• 在私信中或 @ 我时上传日志文件或代码片段（文本文件最大 {max_mb} MB）
• 在任意消息上：*⋮ 更多操作 → Diagnose this message*
{watch}
*检查 GPU 主机*
• `/vllm-diagnose <主机或主机组> [检查项 …]` 或 `/vllm-diagnose <主机> tier <N>`
• 在帖子里 `@vLLM Doctor diagnose <主机>`
{runner}
*每条回答下面*
• *已解决* / *没有帮助*：告诉团队这个知识库案例是否有效
• *在主机上运行诊断* 和 *添加为知识库案例*
"""},
    "slack.help.watch": {"en": "• I also answer error logs posted in {links}\n", "zh": "• 我也会回答发到 {links} 的报错日志\n"},
    "slack.help.runner_off": {"en": "_Host diagnostics are not configured on this bot yet._\n",
                              "zh": "_这个机器人还没有配置主机诊断。_\n"},
    "slack.usage.dm": {
        "en": "Send me a vLLM error log (paste it, or attach it as a file) and I will look for the cause, or "
              "ask a question about your deployment (English or 中文). `/vllm-diagnose help` shows everything I can do.",
        "zh": "发给我一段 vLLM 报错日志（直接粘贴或作为文件上传），我来找原因；也可以用中文或英文问部署问题。"
              "`/vllm-diagnose help` 列出我能做的所有事情。"},
    "slack.usage.explain": {
        "en": "Usage: `/vllm-explain <paste the error log>`. For a long log, attach it as a file in a DM to me or "
              "with a mention instead (slash commands carry only a few thousand characters).",
        "zh": "用法：`/vllm-explain <粘贴报错日志>`。日志很长时，请在私信中作为文件发给我，或者带着文件 @ 我"
              "（斜杠命令只能带几千个字符）。"},
    "slack.file.distilled": {"en": "Full distilled log", "zh": "完整的清洗后日志"},
    "slack.file.explanation": {"en": "Full explanation", "zh": "完整解释"},
    "slack.internal_error": {
        "en": "Sorry, something went wrong on my side while diagnosing this (ref {ref}). The log was not lost: try "
              "again, and tell the bot's admins the ref if it keeps happening.",
        "zh": "抱歉，我这边诊断时出错了（编号 {ref}）。日志没有丢失：请再试一次；如果一直出错，请把编号告诉机器人的管理员。"},
    "slack.handed_back": {
        "en": "This bot replica was stopped before it could finish; another one answers here if Slack re-sends "
              "your message. If nothing appears within a minute, paste the log again.",
        "zh": "这个机器人实例在完成前被停止了；如果 Slack 重新发送你的消息，另一个实例会在这里回答。"
              "如果一分钟内没有回答，请重新粘贴日志。"},
    # App Home: the viewer's recent answers
    "slack.home.line": {"en": "{ago} in {channel}: {verdict} · {what}{mark}", "zh": "{ago}，{channel}：{verdict} · {what}{mark}"},
    "slack.home.mark_fixed": {"en": " · :white_check_mark: fixed", "zh": " · :white_check_mark: 已解决"},
    "slack.home.mark_not_helpful": {"en": " · :x: didn't help", "zh": " · :x: 没有帮助"},
    "slack.ago.now": {"en": "just now", "zh": "刚刚"},
    "slack.ago.min": {"en": "{n} min ago", "zh": "{n} 分钟前"},
    "slack.ago.h": {"en": "{n} h ago", "zh": "{n} 小时前"},
    "slack.ago.days": {"en": "{n} days ago", "zh": "{n} 天前"},
    "verdict.word.match": {"en": "match", "zh": "匹配"},
    "verdict.word.uncertain": {"en": "uncertain", "zh": "不确定"},
    "verdict.word.unknown": {"en": "unknown", "zh": "未知"},
    # KB case form and the rest of KB growth in Slack (bot/slack/reply/kb_growth.py, bot/slack/kb_growth_edge.py)
    "kbform.modal_title": {"en": "Add to vLLM KB", "zh": "添加到 vLLM 知识库"},
    "kbform.cancel": {"en": "Cancel", "zh": "取消"},
    "kbform.close": {"en": "Close", "zh": "关闭"},
    "kbform.done": {"en": "Done", "zh": "完成"},
    "kbform.submit": {"en": "Check and send", "zh": "检查并提交"},
    "kbform.send_review": {"en": "Send for review", "zh": "提交审核"},
    "kbform.loading": {"en": "Reading the message and its thread…", "zh": "正在读取这条消息及其帖子…"},
    "kbform.intro": {"en": "Describe the failure in this log so the next person gets an answer straight away. "
                           "A KB reviewer approves it before it goes live.",
                     "zh": "描述这段日志里的故障，下一位同事就能直接得到答案。知识库审核人批准后才会生效。"},
    "kbform.nearest": {"en": "Nearest known cases for this log:", "zh": "与这段日志最接近的已知案例："},
    "kbform.source": {"en": "From a message in {channel}", "zh": "来自 {channel} 中的一条消息"},
    "kbform.source_more": {"en": " and {n} more log(s) in its thread", "zh": "，以及帖子里另外 {n} 段日志"},
    "kbform.no_log": {"en": "I could not find a log in that message or its thread. Open the form from the message "
                            "that holds the error log.",
                      "zh": "在那条消息及其帖子里没有找到日志。请从包含报错日志的那条消息打开表单。"},
    "kbform.read_failed": {"en": "Sorry, something went wrong while reading that message. Try again.",
                           "zh": "抱歉，读取那条消息时出错了，请重试。"},
    "kbform.check_failed": {"en": "Sorry, the check failed on my side; your form was kept. Try again.",
                            "zh": "抱歉，我这边检查失败了；你的表单已保留，请重试。"},
    "kbform.checking": {"en": "Checking the knowledge base for cases like this one…", "zh": "正在知识库中查找类似的案例…"},
    "kbform.field.title": {"en": "Title", "zh": "标题（英文）"},
    "kbform.hint.title": {"en": "What failed, in a few words a teammate would search for.",
                          "zh": "用几个同事会搜索的词说明什么出了问题。"},
    "kbform.field.title_zh": {"en": "Title in Chinese (中文标题)", "zh": "中文标题"},
    "kbform.hint.title_zh": {"en": "The KB answers in both languages.", "zh": "知识库用中英文两种语言回答。"},
    "kbform.field.area": {"en": "Area", "zh": "类别"},
    "kbform.field.severity": {"en": "Severity", "zh": "严重程度"},
    "kbform.field.cause": {"en": "Cause", "zh": "原因"},
    "kbform.hint.cause": {"en": "Two to five sentences in your own words: what happened and why.",
                          "zh": "用自己的话写两到五句：发生了什么，为什么。"},
    "kbform.field.fix": {"en": "Fix steps", "zh": "解决步骤"},
    "kbform.hint.fix": {"en": "One step per line. A line starting with $ is the command for the step above it.",
                        "zh": "每行一个步骤。以 $ 开头的行是上一步要运行的命令。"},
    "kbform.field.signatures": {"en": "Signatures (one regex per line)", "zh": "特征（每行一个正则表达式）"},
    "kbform.hint.signatures": {
        "en": "Fingerprints of this failure, matched on each cleaned log line. Suggested from the root error lines: "
              "numbers, paths and hex generalised, checked to hit this log and never a healthy start-up.",
        "zh": "这个故障的指纹，逐行匹配清洗后的日志。已根据根因报错行给出建议：数字、路径和十六进制已泛化，"
              "并确认能命中这段日志、不会命中正常启动的日志。"},
    "kbform.field.examples": {"en": "Example logs", "zh": "示例日志"},
    "kbform.hint.examples": {
        "en": "At least two. Each starts with the URL where it was posted, then the log lines; separate them with a "
              "line ---. The first is this message (secrets redacted).",
        "zh": "至少两段。每段先写发布它的 URL，再写日志行；段与段之间用一行 --- 分隔。第一段是这条消息（已去除密钥）。"},
    "kbform.field.references": {"en": "References (optional)", "zh": "参考链接（可选）"},
    "kbform.hint.references": {"en": "More URLs, one per line: issues, docs, PRs.",
                               "zh": "更多 URL，每行一个：issue、文档、PR。"},
    "kbform.similar": {"en": "{pct} similar", "zh": "相似度 {pct}"},
    "kbform.sig_hits": {"en": " · its signature matches your log", "zh": " · 它的特征命中了你的日志"},
    "kbform.overlap": {"en": " · your signature matches its examples", "zh": " · 你的特征命中了它的示例"},
    "kbform.dup_head": {"en": "This may already be in the knowledge base.", "zh": "知识库里可能已经有这个案例。"},
    "kbform.dup_yours": {"en": "Your case", "zh": "你的案例"},
    "kbform.dup_example": {"en": "Add my log as an example of: {title}", "zh": "把我的日志添加为示例：{title}"},
    "kbform.dup_case": {"en": "case {case} · {pct} similar", "zh": "案例 {case} · 相似度 {pct}"},
    "kbform.dup_new": {"en": "It is a new case: send it for review", "zh": "这是新案例：提交审核"},
    "kbform.dup_new_hint": {"en": "Reviewers see the similar cases too", "zh": "审核人也会看到这些相似案例"},
    "kbform.dup_question": {"en": "What should happen?", "zh": "接下来怎么处理？"},
    "kbform.sent_example": {"en": "your log as a new example of {case}", "zh": "你的日志（作为 {case} 的新示例）"},
    "kbform.sent": {"en": ":white_check_mark: Sent {what} for review. You'll get a DM when a reviewer approves or "
                          "rejects it.",
                    "zh": ":white_check_mark: 已提交审核：{what}。审核人批准或拒绝后你会收到私信。"},
    "kbform.saved_no_reviewers": {
        "en": ":hourglass: Saved {what}, but no KB reviewers are configured yet (VLLM_DOCTOR_KB_REVIEWERS or "
              "VLLM_DOCTOR_KB_REVIEWER_GROUP). An admin can approve it with `vllm-doctor kb review`.",
        "zh": ":hourglass: 已保存 {what}，但还没有配置知识库审核人（VLLM_DOCTOR_KB_REVIEWERS 或 "
              "VLLM_DOCTOR_KB_REVIEWER_GROUP）。管理员可以用 `vllm-doctor kb review` 批准。"},
    "kbform.thanks_what_case": {"en": "KB case {case}", "zh": "知识库案例 {case}"},
    "kbform.thanks_what_answer": {"en": "this answer", "zh": "这条回答"},
    "kbform.thanks_fixed": {"en": "Thanks! Noted that {what} fixed it.", "zh": "谢谢！已记录：{what}解决了问题。"},
    "kbform.thanks_outcome": {"en": " Outcome so far: {outcome} (one vote per person); it now ranks a little higher.",
                              "zh": " 目前的反馈：{outcome}（每人一票）；它的排名会略微提高。"},
    "kbform.thanks_not_helpful": {
        "en": "Thanks for telling me {what} did not help. This log is now on the list of candidates for new cases; "
              "if you find the real cause, *Add as a KB case* turns it into an answer for the next person.",
        "zh": "谢谢告诉我{what}没有帮助。这段日志已加入新案例候选列表；找到真正的原因后，点 *添加为知识库案例*，"
              "下一位同事就能得到答案。"},
    "kbform.thanks_replaced": {"en": " (Your earlier rating of this answer was replaced.)",
                               "zh": "（你之前对这条回答的评价已被替换。）"},
    "kbform.outcome": {"en": ":bar_chart: Outcome of this KB case so far: {outcome} (one vote per person)",
                       "zh": ":bar_chart: 这个知识库案例目前的反馈：{outcome}（每人一票）"},
    "kbform.too_old": {
        "en": "Thanks for telling me {said}. It is too old for me to link your rating to its KB case (I keep "
              "the last few hundred answers), so it was not counted; paste the log again to rate a fresh answer.",
        "zh": "谢谢告诉我{said}。这条回答太久了，无法把你的评价关联到它的知识库案例（我只保留最近几百条回答），"
              "所以没有计入；请重新贴一次日志，再为新的回答评价。"},
    "kbform.said_fixed": {"en": "this answer fixed it", "zh": "这条回答解决了问题"},
    "kbform.said_not_helpful": {"en": "this answer did not help", "zh": "这条回答没有帮助"},
    "kbhome.head": {"en": "*Candidates for new KB cases*", "zh": "*新知识库案例的候选*"},
    "kbhome.pending": {"en": ":inbox_tray: {n} case(s) waiting for review", "zh": ":inbox_tray: {n} 个案例等待审核"},
    "kbhome.none": {"en": "None: every recent log was answered, and nobody said an answer did not help.",
                    "zh": "暂无：最近的日志都得到了回答，也没有人说回答没有帮助。"},
    "kbhome.no_match": {"en": "no match", "zh": "没有匹配"},
    "kbhome.not_helped": {"en": "{case} did not help", "zh": "{case} 没有帮助"},
    "kbhome.seen": {"en": " · seen {n}×", "zh": " · 出现 {n} 次"},
    "kbhome.no_error_line": {"en": "(no error line)", "zh": "（没有报错行）"},
    # `vllm-doctor diagnose` text report (bot/runner/cli.py)
    "host.col.check": {"en": "check", "zh": "检查项"},
    "host.col.finding": {"en": "finding", "zh": "结果"},
    "host.col.cases": {"en": "KB cases", "zh": "知识库案例"},
    "host.summary": {"en": "{hosts} host(s), {summary}{extra} in {secs:.1f} s",
                     "zh": "{hosts} 台主机，{summary}{extra}，用时 {secs:.1f} 秒"},
    "host.count": {"en": "{n} {verdict}", "zh": "{n} 项{verdict}"},
    # the root line and the answer when no case covers a log (bot/diagnosis/root.py, bot/present/render.py, Slack)
    "root.lead": {"en": "The error to fix — L{line}: {text}", "zh": "需要修复的错误 — 第 {line} 行：{text}"},
    "root.component": {"en": "component: {component} ({title})", "zh": "所属部分：{component}（{title}）"},
    "root.kind.case": {"en": "the line the matched case rests on", "zh": "匹配案例所依据的行"},
    "root.kind.exception": {"en": "the earliest exception under the wrapper lines", "zh": "包装行之下最早的异常行"},
    "root.kind.notice": {"en": "the start-up line that states the cause", "zh": "启动日志中说明原因的行"},
    "root.kind.fact": {"en": "the memory profile line that states the cause", "zh": "显存分析中说明原因的行"},
    "root.kind.error": {"en": "the earliest error line", "zh": "最早的报错行"},
    "root.kind.source": {"en": "the source line that raises it: the paste ends before the error's own line",
                         "zh": "抛出该错误的源代码行：粘贴内容在错误本身那一行之前就结束了"},
    "root.kind.wrapper": {"en": "only a wrapper line states the failure; the error it wraps is not in the paste",
                          "zh": "只有包装行说明了故障；它所包装的原始错误不在粘贴内容中"},
    "root.raised": {"en": "raised in: {file}:{line}, in {function} (L{log_line})",
                    "zh": "抛出位置：{file} 第 {line} 行，函数 {function}（日志第 {log_line} 行）"},
    "root.why": {"en": "chosen: {kind}", "zh": "选择依据：{kind}"},
    "root.cut": {"en": "… [{n} more characters]", "zh": "……［另有 {n} 个字符］"},
    "root.other": {"en": "a second failure follows — L{line}: {text} ({component}); the first one is answered",
                   "zh": "之后还有第二处故障 — 第 {line} 行：{text}（{component}）；这里回答的是第一处"},
    "root.missing.truncated": {"en": "No line states the error to fix: the paste ends inside a traceback before its "
                                     "exception line. Paste the lines that follow.",
                               "zh": "没有哪一行说明了需要修复的错误：粘贴内容在 traceback 的异常行之前就结束了。请把后面的几行也贴上来。"},
    "root.missing.warnings_only": {"en": "No line states the error to fix: the paste holds only INFO and WARNING "
                                         "lines. Paste the lines where the process failed.",
                                   "zh": "没有哪一行说明了需要修复的错误：粘贴内容只有 INFO 和 WARNING 行。请贴出进程出错的那几行。"},
    "root.missing.no_error": {"en": "No line states the error to fix: the paste has no error line. Paste the lines "
                                    "where the process failed.",
                              "zh": "没有哪一行说明了需要修复的错误：粘贴内容中没有报错行。请贴出进程出错的那几行。"},
    "root.missing.wrappers_only": {"en": "No line states the error to fix: only wrapper lines, and the paste is cut "
                                         "inside a traceback. Paste the lines before and after them.",
                                   "zh": "没有哪一行说明了需要修复的错误：只有包装行，而且粘贴内容在 traceback 中断开。请把前后的几行也贴上来。"},
    "unknown.none_covers": {"en": "No known case covers this failure.", "zh": "没有已知故障案例覆盖这个问题。"},
    "unknown.possibly": {"en": "Possibly related cases (not established by the log; do not apply their fixes as they are):",
                         "zh": "可能相关的案例（日志并不能证实；请勿直接套用它们的解决步骤）："},
    "unknown.triage": {"en": "What to check first — {title}:", "zh": "首先检查 — {title}："},
    "unknown.checks": {"en": "Host checks worth running:", "zh": "值得运行的主机检查："},
    "unknown.versions": {"en": "Known cases whose affected versions include this log's: {cases}",
                         "zh": "受影响版本包含本日志版本的已知故障：{cases}"},
    "unknown.search": {"en": "Search for: {phrase}", "zh": "搜索关键词：{phrase}"},
    "unknown.draft": {"en": "A bug-report draft (nothing is sent): `vllm-doctor report-draft LOGFILE`",
                      "zh": "生成问题报告草稿（不会发送到任何地方）：`vllm-doctor report-draft 日志文件`"},
    "label.setup": {"en": "What the log says about your setup:", "zh": "日志中关于部署环境的信息："},
    "label.also_noticed": {"en": "Also noticed (not the cause of this failure):", "zh": "另外注意到（不是这次故障的原因）："},
    "label.model_reading": {"en": "The model's reading, not a known case", "zh": "模型的解读（不是已知故障案例）"},
    "area.cuda": {"en": "cuda", "zh": "CUDA 环境"},
    "area.distributed": {"en": "distributed", "zh": "分布式"},
    "area.hardware": {"en": "hardware", "zh": "硬件"},
    "area.install": {"en": "install", "zh": "安装"},
    "area.memory": {"en": "memory", "zh": "显存"},
    "area.model": {"en": "model", "zh": "模型"},
    "area.performance": {"en": "performance", "zh": "性能"},
    "area.serving": {"en": "serving", "zh": "服务"},
    "why.signature": {"en": "signature", "zh": "特征匹配"},
    "why.fact_rule": {"en": "fact rule", "zh": "事实规则"},
    "why.fact": {"en": "fact", "zh": "日志事实"},
    "why.earlier_root": {"en": "earlier root error: diagnose this line", "zh": "更早的根本报错：请诊断这一行"},
    "why.frame": {"en": "frame", "zh": "调用栈"},
    "why.similar": {"en": "similar wording", "zh": "表述相近"},
    "host.not_checked": {"en": ", {n} host(s) not checked", "zh": "，{n} 台主机未检查"},
    "host.drift": {"en": "drift", "zh": "变化"},
    "host.differs": {"en": "differs", "zh": "差异"},
    "host.baseline_saved": {"en": "baseline saved: later runs of this target report drift from it",
                            "zh": "已保存基线：之后对该目标的检查会报告相对它的变化"},
    "host.verdict.ok": {"en": "ok", "zh": "正常"},
    "host.verdict.warn": {"en": "warn", "zh": "警告"},
    "host.verdict.fail": {"en": "fail", "zh": "失败"},
    "host.verdict.error": {"en": "error", "zh": "出错"},
    "host.verdict.timeout": {"en": "timeout", "zh": "超时"},
    "host.verdict.skipped": {"en": "skipped", "zh": "跳过"},
}

# fix commands fitted to the log (bot/diagnosis/fix_values.py): the arithmetic of a computed value, and notes
_TEXT.update({
    "fit.max_model_len.estimated": {"en": "{value} = the longest context the log says the KV cache holds",
                                    "zh": "{value} = 日志给出的 KV 缓存能容纳的最长上下文"},
    "fit.max_model_len.tokens": {"en": "{value} = the KV cache size in tokens the log states",
                                 "zh": "{value} = 日志给出的 KV 缓存容量（token 数）"},
    "fit.max_model_len.blocks": {"en": "{value} = {blocks} GPU blocks × {block} tokens per block",
                                 "zh": "{value} = {blocks} 个 GPU 块 × 每块 {block} 个 token"},
    "fit.gpu_memory_utilization.parts": {
        "en": "{value} = (weights {weights} + activation peak {activation} + non-torch {non_torch} + KV cache needed "
              "{need} GiB) / {total} GiB per GPU, rounded up, + 0.01 headroom",
        "zh": "{value} = （权重 {weights} + 激活峰值 {activation} + 非 torch 显存 {non_torch} + 所需 KV 缓存 {need} GiB）"
              "/ 每卡 {total} GiB，向上取整，再留 0.01 余量"},
    "fit.gpu_memory_utilization.delta": {
        "en": "{value} = {current} + (KV cache needed {need} − available {available} GiB) / {total} GiB per GPU, "
              "rounded up, + 0.01 headroom",
        "zh": "{value} = {current} +（所需 KV 缓存 {need} − 可用 {available} GiB）/ 每卡 {total} GiB，向上取整，再留 0.01 余量"},
    "fit.tp.heads": {"en": "{value} = the largest size ≤ {gpus} GPUs that divides the {heads} attention heads",
                     "zh": "{value} = 不超过 {gpus} 张卡、且能整除 {heads} 个注意力头的最大并行数"},
    "fit.tp.gpus": {"en": "{value} = the GPUs the log says are visible",
                    "zh": "{value} = 日志显示的可见 GPU 数"},
    "fit.note.conflict": {"en": "the log states more than one {name}: the commands use {used} (L{line}, the first "
                                "line that states it); it also says {others}",
                          "zh": "日志中的 {name} 不止一个：命令使用 {used}（L{line}，最先给出它的一行）；日志里还有 {others}"},
    "fit.note.utilization_too_high": {
        "en": "holding the KV cache would need gpu_memory_utilization {value}, above {max}: lower --max-model-len "
              "or add GPUs instead",
        "zh": "要放下 KV 缓存需要 gpu_memory_utilization {value}，超过 {max}：请改为降低 --max-model-len 或增加 GPU"},
    # `explain --since GOOD.log`: what differs from the working run (bot/diagnosis/since.py)
    "since.head": {"en": "What changed since the working run ({source}):", "zh": "与正常运行（{source}）相比的变化："},
    "since.none": {"en": "Nothing the two logs both state differs (versions, engine arguments, memory figures).",
                   "zh": "两份日志都给出的版本、引擎参数和显存数字没有差异。"},
    "since.versions": {"en": "versions", "zh": "版本"},
    "slack.since.source": {"en": "the healthy start-up of {model} pasted in this channel on {day}",
                           "zh": "{day} 在本频道贴出的 {model} 正常启动日志"},
    "since.engine": {"en": "engine args", "zh": "引擎参数"},
    "since.memory": {"en": "memory", "zh": "显存"},
    "fit.unfilled": {"en": "<…> values are not in the log: fill them in before running the command",
                     "zh": "<…> 处的值日志里没有，请先填上再运行命令"},
})


def t(key: str, lang: Language, **values: Any) -> str:
    """The fixed text `key` in `lang` (English when a Chinese form is missing)."""
    forms = _TEXT[key]
    text = forms.get(lang) or forms["en"]
    return text.format(**values) if values else text


# A ranking or version note (bot.models.Note, a value) → the key of its words above, and the values they take.
_NOTE_KEYS: dict[NoteKind, str] = {
    "truncated": "note.truncated", "truncated_answered": "note.truncated_answered",
    "two_failures": "note.two_failures", "consequence": "note.consequence",
    "consequence_unseen": "note.consequence_unseen", "upgrade": "version.upgrade",
    "already_fixed": "version.already_fixed", "inside_affects": "version.inside", "outside_affects": "version.outside",
}


def note_text(note: Note, lang: Language) -> str:
    """A note of the ranking (bot/diagnosis/match.py, bot/diagnosis/versions.py) in words, in `lang`."""
    key = _NOTE_KEYS[note.kind]
    if note.kind == "two_failures":
        return t(key, lang, line=note.line, case=note.case_id)
    if note.kind == "consequence":
        return t(key, lang, line=note.line)
    if note.kind in ("upgrade", "already_fixed", "inside_affects", "outside_affects"):
        if note.source == "host":
            where = t("version.where_host", lang, host=note.host or "?", shown=note.shown)
        else:
            where = t("version.where_log", lang, shown=note.shown)
        version = {"spec": note.version} if note.kind.endswith("_affects") else {"fixed": note.version}
        return t(key, lang, package=note.package, where=where, **version)
    return t(key, lang)


# Chinese labels of the facts a log states (bot/diagnosis/facts.py FACT_LABELS has the English ones).
FACT_LABELS_ZH: dict[str, str] = {
    "vllm_version": "vLLM 版本", "torch_version": "torch 版本", "cuda_version": "CUDA 版本",
    "driver_version": "NVIDIA 驱动版本", "python_version": "Python 版本", "gpu_name": "GPU 型号",
    "compute_capability": "计算能力", "gpu_count": "可见 GPU 数", "total_gpu_memory_gib": "GPU 显存（GiB）",
    "model": "模型", "dtype": "数据类型", "quantization": "量化方式", "kv_cache_dtype": "KV 缓存数据类型",
    "max_model_len": "最大上下文长度", "tensor_parallel_size": "张量并行规模", "pipeline_parallel_size": "流水线并行规模",
    "gpu_memory_utilization": "显存使用比例", "enforce_eager": "强制 eager 模式", "block_size": "块大小",
    "num_attention_heads": "注意力头数", "weights_gib": "权重（GiB）", "activation_peak_gib": "激活峰值（GiB）",
    "non_torch_gib": "非 torch 显存（GiB）", "kv_cache_gib": "KV 缓存（GiB）", "kv_cache_tokens": "KV 缓存（token 数）",
    "gpu_blocks": "GPU 块数", "cpu_blocks": "CPU 块数", "max_concurrency": "最大并发（倍）",
    "estimated_max_model_len": "KV 缓存可容纳的最长上下文（token 数）", "kv_cache_needed_gib": "所需 KV 缓存（GiB）",
    "port": "端口", "launch_command": "启动命令", "platform": "平台",
}


def fact_label(name: str, english: str, lang: Language) -> str:
    return FACT_LABELS_ZH.get(name, english) if lang == "zh" else english


def case_title(case: Case, lang: Language) -> str:
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
    "fact_label",
    "is_language",
    "note_text",
    "step_text",
    "t",
]
