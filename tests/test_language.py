"""Chinese-speaking teams: segmentation, glossary, questions without a log, answers in the asker's language.

Real parts: the bundled KB, the real MiniLM index (`doctor` fixture), rjieba, the CLI as a subprocess.
The questions here are not from tests/eval/questions.jsonl (that set is for measuring, not for tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.diagnosis.question import expand, looks_like_question, question_language
from bot.explain.explainer import kb_only_explanation
from bot.present.i18n import as_language, case_cause, is_language, step_text, t
from indexer.lexical import tokenize
from indexer.segment import chinese_tokens
from kb.glossary import default_glossary, load_glossary
from kb.loader import KBError, load_kb

KB = load_kb()


# --- segmentation and tokens -------------------------------------------------------------------------
def test_chinese_is_segmented_into_words_and_glossary_terms_stay_whole() -> None:
    words = chinese_tokens("一启动就爆显存，显存不足")
    assert "爆显存" in words and "显存不足" in words  # glossary terms kept whole
    assert "显存" in words and "不足" in words  # search mode also yields the parts
    assert "就" not in words and "，" not in words  # function words and punctuation dropped


def test_mixed_text_gives_latin_identifiers_and_chinese_words() -> None:
    tokens = tokenize("运行 vllm serve 报错：找不到 libcudnn.so.9")
    assert {"vllm", "serve", "libcudnn.so.9", "libcudnn"} <= set(tokens)
    assert "不到" in tokens
    assert tokenize("RuntimeError: CUDA out of memory") == tokenize("RuntimeError: CUDA out of memory。")


# --- glossary ------------------------------------------------------------------------------------------
def test_glossary_expands_both_ways() -> None:
    g = default_glossary()
    zh = expand("多卡推理卡住没反应", g)
    assert "hang" in zh.lexical and "NCCL" in zh.english and "tensor parallel" in zh.english
    en = expand("the server hangs after start", g)
    assert "卡住" in en.lexical and "卡住" not in en.english  # the dense view stays English


def test_a_broken_glossary_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "glossary.yaml"
    bad.write_text("entries:\n  - zh: [GPU]\n    en: [显存]\n  - zh: [卡住]\n    en: [hang]\n    extra: 1\n")
    with pytest.raises(KBError) as exc:
        load_glossary(bad)
    message = str(exc.value)
    assert str(bad) in message
    assert "entries.0.zh" in message and "entries.0.en" in message and "entries.1.extra" in message


# --- what is a question --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["机器重启以后好像找不到驱动了", "how do I make decoding faster?", "运行 vllm serve 报错：找不到 libcudnn"],
)
def test_questions_are_recognised(text: str) -> None:
    assert looks_like_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: No available memory for the cache blocks.",
        "ERROR 04-28 15:55:45 worker_base.py:157] boom",
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>',
        "(VllmWorker rank=0 pid=12) hello",
    ],
)
def test_logs_are_not_questions(text: str) -> None:
    assert not looks_like_question(text)


def test_question_language() -> None:
    assert question_language("多卡卡住") == "zh"
    assert question_language("NCCL hang on 8 GPUs") == "en"
    assert question_language("vllm 卡住 with tp=8") == "zh"


# --- questions end to end (real index) ----------------------------------------------------------------
def test_pure_chinese_question_finds_the_case_and_names_the_terms(doctor) -> None:
    d = doctor.match("八张卡张量并行跑着跑着就没反应了，最后看门狗超时")
    assert d.kind == "question" and d.distilled.language == "zh"
    assert d.matches[0].case_id == "nccl-timeout-hang"
    why = d.matches[0].evidence[0].why
    assert "问题中的词" in why or "词表对应" in why
    assert "没反应" in why or "超时" in why  # the question's own words are named


def test_english_question_reaches_the_chinese_free_case(doctor) -> None:
    d = doctor.match("the docker container cannot see any nvidia gpu")
    assert d.kind == "question" and d.distilled.language == "en"
    assert "no-gpu-detected" in [m.case_id for m in d.matches[:3]]


def test_a_vague_question_is_uncertain_with_candidates_never_a_confident_answer(doctor) -> None:
    d = doctor.match("显存不够用怎么办")
    assert d.verdict != "match"
    memory = {"kv-cache-no-memory", "weights-exceed-gpu-memory", "gpu-memory-held-by-other-process",
              "cuda-graph-capture-oom", "max-model-len-exceeds-kv-cache", "prefill-oom-long-input"}
    assert len({m.case_id for m in d.matches[:3]} & memory) >= 2


def test_a_question_quoting_an_exact_error_uses_the_signature(doctor) -> None:
    d = doctor.match("启动报 No available memory for the cache blocks 是什么意思")
    assert d.kind == "log" and d.verdict == "match" and d.matches[0].signature_hit
    assert d.matches[0].case_id == "kv-cache-no-memory"


def test_unrelated_chat_gets_no_confident_answer(doctor) -> None:
    for text in ("今天中午吃什么", "what a lovely day for a picnic"):
        assert doctor.match(text).verdict != "match"


def test_a_chinese_log_comment_adds_its_words_to_the_lexical_query(doctor) -> None:
    log = KB.by_id()["dev-shm-too-small"].examples[0].log
    d = doctor.match("用 docker 跑多卡，共享内存好像不够：\n" + log)
    assert d.kind == "log" and d.distilled.language == "zh"
    assert d.matches[0].case_id == "dev-shm-too-small"


# --- the answer in the asker's language -----------------------------------------------------------------
def test_kb_only_answer_is_chinese_end_to_end(doctor) -> None:
    d = doctor.match("两台机器分布式推理，网卡选错了连不上")
    case = doctor.case(d.matches[0].case_id)
    exp = kb_only_explanation(d, [case], language="zh")
    assert exp.language == "zh" and exp.summary == case.summary_zh and exp.why == case_cause(case, "zh")
    assert all(is_language(s, "zh") for s in exp.fix_steps)
    from bot.diagnosis.fix_values import fill

    # commands unchanged by the language, only filled from the log (bot/diagnosis/fix_values.py)
    commands = [fill(s.command, d.fix_values) for s in case.fix if s.command]
    assert all(any(c in s for s in exp.fix_steps) for c in commands)


def test_a_case_without_chinese_text_shows_the_english_text() -> None:
    case = KB.by_id()["port-in-use"].model_copy(update={"cause_zh": "", "summary_zh": ""})
    assert case_cause(case, "zh") == " ".join(case.cause.split())
    step = case.fix[0].model_copy(update={"text_zh": ""})
    assert step_text(step, "zh") == step.text


def test_language_names_and_checks() -> None:
    assert as_language("zh-CN") == "zh" and as_language("zh_TW") == "zh" and as_language("en-US") == "en"
    assert as_language("fr-FR") is None and as_language(None) is None
    assert is_language("把 `--max-model-len` 调小到 8192，然后重启服务。", "zh")
    assert not is_language("Lower `--max-model-len` to 8192 and restart the server.", "zh")
    assert "LLM" in t("note.unavailable", "zh", reason="connection refused")


# --- bundled cases carry their Chinese text -------------------------------------------------------------
def test_every_bundled_case_is_written_in_chinese() -> None:
    for case in KB.cases:
        assert is_language(case.cause_zh, "zh"), case.id
        assert all(is_language(s.text_zh, "zh") for s in case.fix), case.id


# --- CLI --------------------------------------------------------------------------------------------------
def _cli(args: list[str], index_dir: Path, stdin: bytes) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), NO_COLOR="1")
    env.pop("VLLM_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "bot", *args], input=stdin, capture_output=True, env=env,
                          timeout=300, check=False)


def _out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.decode("utf-8")


def test_cli_lang_switches_the_whole_answer(doctor, index_dir: Path) -> None:
    log = KB.by_id()["port-in-use"].examples[0].log.encode()
    zh = _cli(["explain", "--no-llm", "--lang", "zh", "-"], index_dir, log)
    assert zh.returncode == 0, zh.stderr
    assert "结论: 匹配" in _out(zh) and "解决步骤:" in _out(zh) and "Verdict" not in _out(zh)
    out = _cli(["explain", "--no-llm", "--json", "-"], index_dir, "多卡推理一直卡住不动".encode())
    data = json.loads(_out(out))
    assert data["language"] == "zh" and data["kind"] == "question"
    en = _cli(["explain", "--no-llm", "--json", "--lang", "en", "-"], index_dir, "多卡推理一直卡住不动".encode())
    assert json.loads(_out(en))["language"] == "en"


def test_every_fixed_text_has_both_languages_with_the_same_placeholders() -> None:
    """bot/present/i18n.py holds every surface string: a Chinese form for each, filling the same {fields}."""
    import string

    from bot.present.i18n import _TEXT

    def fields(text: str) -> set[str]:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name}

    missing = [k for k, forms in _TEXT.items() if not forms.get("zh")]
    assert missing == []
    differ = [k for k, forms in _TEXT.items() if forms["en"] and fields(forms["en"]) != fields(forms["zh"])]
    assert differ == []
    layout_only = {"slack.home.line"}  # "{ago}，{channel}：…": the words are in its fields
    english = {k for k, forms in _TEXT.items() if not any("\u4e00" <= c <= "\u9fff" for c in forms["zh"])}
    assert english == layout_only
