"""Pure parts of the explanation step: answer validation, the streaming preview, the prompt templates."""

from __future__ import annotations

import json

import pytest
from llm_support import kb_cases, make_diagnosis

from bot.explain.explainer import (
    AnswerLimits,
    AnswerRejected,
    PreviewScanner,
    answer_schema,
    estimate_tokens,
    parse_answer,
    resolve_language,
)

IDS = ("kv-cache-no-memory", "none")


def test_parse_answer_accepts_and_cleans():
    raw = json.dumps(
        {
            "case_id": " kv-cache-no-memory ",
            "summary": "Out of\tKV\ncache.",
            "why": "",
            "fix_steps": ["Raise it.", "", "Lower it."],
            "confidence": "High",
        }
    )
    got = parse_answer(raw, IDS)
    assert got == {
        "case_id": "kv-cache-no-memory",
        "summary": "Out of KV cache.",
        "why": "",
        "fix_steps": ["Raise it.", "Lower it."],
        "confidence": "high",
    }


def test_parse_answer_accepts_raw_control_characters_inside_strings():
    # xgrammar lets literal newlines/tabs into JSON strings; json.loads(strict=True) would refuse them
    raw = '{"case_id": "none", "summary": "line one\nline\ttwo", "why": "w", "fix_steps": ["a\x01b"], "confidence": "low"}'
    got = parse_answer(raw, IDS)
    assert got["summary"] == "line one line two" and got["fix_steps"] == ["a b"]


def test_parse_answer_truncates_overlong_fields():
    raw = json.dumps({"case_id": "none", "summary": "x" * 5000, "why": "y", "fix_steps": ["z"] * 40})
    got = parse_answer(raw, IDS)
    assert len(got["summary"]) <= 300 and len(got["fix_steps"]) <= 6


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "null",
        '"just a string"',
        '{"case_id": 3, "summary": "s", "fix_steps": ["a"]}',
        '{"case_id": "invented-case", "summary": "s", "fix_steps": ["a"]}',
        '{"case_id": "none", "summary": 5, "fix_steps": ["a"]}',
        '{"case_id": "none", "summary": "s", "fix_steps": {"a": 1}}',
        '{"case_id": "none", "summary": "s", "fix_steps": [1, 2]}',
        '{"case_id": "none", "summary": "s"',
    ],
)
def test_parse_answer_rejects(raw):
    with pytest.raises(AnswerRejected):
        parse_answer(raw, IDS)


def _feed_all(text: str, size: int) -> str:
    scanner = PreviewScanner()
    out = "".join(scanner.feed(text[i : i + size]) for i in range(0, len(text), size))
    assert out == scanner.text
    return out


ANSWER = {
    "case_id": "kv-cache-no-memory",
    "summary": 'He said "stop" \\ then \u4e2d\u6587 \U0001f600.',
    "why": "Because\nL12.",
    "fix_steps": ["One, two: {three}", "Four [five]"],
    "confidence": "low",
}


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 10_000])
def test_preview_is_the_same_whatever_the_chunking(size):
    for ensure_ascii in (True, False):
        text = json.dumps(ANSWER, ensure_ascii=ensure_ascii, indent=1)
        assert _feed_all(text, size) == (
            'He said "stop" \\ then 中文 😀.\n\nBecause L12.\n\n1. One, two: {three}\n2. Four [five]'
        )


def test_preview_ignores_keys_and_other_values():
    text = json.dumps(
        {"confidence": "high", "case_id": "summary", "extra": {"summary": "nested"}, "summary": "S"}
    )
    assert _feed_all(text, 3) == "S"


def test_preview_follows_the_order_the_model_writes():
    text = json.dumps({"fix_steps": ["a"], "why": "w", "summary": "s"})
    assert _feed_all(text, 4) == "1. a\n\nw\n\ns"


def test_schema_limits_never_exceed_the_token_budget():
    for tokens in (192, 300, 512, 768, 1024, 4096):
        limits = AnswerLimits.for_tokens(tokens)
        total = limits.summary + limits.why + limits.steps * limits.step
        assert total <= tokens * 2
        schema = answer_schema(IDS, limits)
        assert schema["properties"]["case_id"]["enum"] == list(IDS)
        assert schema["additionalProperties"] is False


def test_estimate_is_conservative_for_cjk_and_ascii():
    ascii_msg = [{"role": "user", "content": "word " * 400}]
    cjk_msg = [{"role": "user", "content": "显存不足" * 100}]
    assert estimate_tokens(ascii_msg) >= 2000 / 2.5
    assert estimate_tokens(cjk_msg) >= 400


def test_resolve_language():
    zh = make_diagnosis(language="zh")
    assert resolve_language(zh, None, "auto") == "zh"
    assert resolve_language(zh, None, "en") == "en"
    assert resolve_language(zh, "en", "zh") == "en"
    assert resolve_language(make_diagnosis(), "fr", "auto") == "en"  # unknown request → ignored


def test_prompt_templates_render_every_part():
    from bot.explain.explainer import Explainer
    from bot.explain.llm import LLMClient

    exp = Explainer(LLMClient("http://127.0.0.1:9/v1"))
    cases = kb_cases("kv-cache-no-memory", "max-model-len-exceeds-kv-cache")
    draft = exp._draft(make_diagnosis(language="zh"), cases, ["nvidia-smi: 2 GPUs"], "zh")
    system, user = (m["content"] for m in draft.messages)
    assert '"kv-cache-no-memory" | "max-model-len-exceeds-kv-cache" | "none"' in system
    assert "Simplified Chinese" in system and "Simplified Chinese" in user
    assert "Verdict of the matching engine: match." in user
    assert "L12 [error]: ValueError: No available memory" in user and "L11: File" in user
    assert "### kv-cache-no-memory (score 0.90, signature matched)" in user
    assert cases[0].title_zh in user
    assert "- nvidia-smi: 2 GPUs" in user
    assert "{{" not in user and "{%" not in user
