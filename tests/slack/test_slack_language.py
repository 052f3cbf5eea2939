"""The answer in the asker's language in Slack: the user's locale (users.info, cached), else the text; the
LLM is asked for that language, and an answer in another language falls back to the Chinese KB answer.
Real bot over HTTP, real engine, fake Slack Web API and fake OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from fake_slack import FakeSlack
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG

from bot.pipeline import Pipeline


def dm(ts: str, text: str, user: str = "U0ALICE1") -> dict[str, Any]:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": user, "text": text,
            "ts": ts, "event_ts": ts}


def final_answer(fake: FakeSlack, ts: str, until: Any = None, timeout: float = 120) -> list[dict[str, Any]]:
    """Blocks of the last edit of the answer to the message at `ts` (the placeholder is edited into it)."""

    def edits(calls: list[Any]) -> list[Any]:
        posted = next((c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                       and c.params.get("_ts")), None)
        if posted is None:
            return []
        return [c for c in calls if c.method == "chat.update" and c.params.get("ts") == posted.params["_ts"]]

    def done(calls: list[Any]) -> bool:
        found = edits(calls)
        return bool(found) and (until is None or until(json.dumps(found[-1].params["blocks"], ensure_ascii=False)))

    calls = fake.wait_for(done, timeout=timeout)
    return edits(calls)[-1].params["blocks"]


def text_of(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_a_chinese_locale_gets_the_whole_kb_answer_in_chinese(http_bot: Any, fake_slack: FakeSlack) -> None:
    fake_slack.locales["U0ALICE1"] = "zh-CN"
    _, sender = http_bot
    sender.event(dm("1700000300.000100", KV_CACHE_LOG), "Ev0ZH1")
    blocks = final_answer(fake_slack, "1700000300.000100")
    text = text_of(blocks)
    assert "最可能的原因" in text and "证据" in text and "解决步骤" in text and "已解决" in text
    for english in ("Likely cause", "*Evidence*", "*Fix*", "Fixed it", "From the knowledge base"):
        assert english not in text
    assert "--gpu-memory-utilization" in text  # commands unchanged
    # a second message: the locale comes from the cache, not from another users.info call
    sender.event(dm("1700000301.000100", KV_CACHE_LOG), "Ev0ZH2")
    final_answer(fake_slack, "1700000301.000100")
    assert len(fake_slack.calls_to("users.info")) == 1


def test_english_locale_and_a_chinese_question_answer_in_chinese(http_bot: Any, fake_slack: FakeSlack) -> None:
    _, sender = http_bot  # no locale set: the fake answers en-US, Slack's default
    sender.event(dm("1700000302.000100", "八张卡跑张量并行，推理一直卡住没反应"), "Ev0ZH3")
    text = text_of(final_answer(fake_slack, "1700000302.000100"))
    assert "nccl-timeout-hang" in text and "你的问题" in text and "解决步骤" in text
    sender.event(dm("1700000303.000100", "multi gpu inference hangs forever, nccl watchdog"), "Ev0EN3")
    english = text_of(final_answer(fake_slack, "1700000303.000100"))
    assert "nccl-timeout-hang" in english and "Your question" in english and "解决步骤" not in english


def test_without_users_read_the_text_decides(http_bot: Any, fake_slack: FakeSlack) -> None:
    fake_slack.scopes.discard("users:read")
    _, sender = http_bot
    sender.event(dm("1700000304.000100", KV_CACHE_LOG), "Ev0NOSCOPE")
    text = text_of(final_answer(fake_slack, "1700000304.000100"))
    assert "Likely cause" in text and "最可能的原因" not in text


@pytest.fixture
def english_llm() -> Iterator[FakeOpenAI]:
    answer = {
        "case_id": KV_CACHE_CASE,
        "summary": "The KV cache had no room left after loading the weights.",
        "why": "Weights and activations used the whole budget.",
        "fix_steps": ["Raise --gpu-memory-utilization to 0.95.", "Lower --max-model-len."],
        "confidence": "high",
    }
    server = FakeOpenAI(answer, pieces=8, delay_s=0.02).start()
    yield server
    server.stop()


def test_an_english_llm_answer_to_a_chinese_asker_falls_back_to_the_chinese_kb_answer(
    make_http_bot: Any, fake_slack: FakeSlack, english_llm: FakeOpenAI, settings: Any
) -> None:
    fake_slack.locales["U0ALICE1"] = "zh-CN"
    engine = Pipeline.from_settings(settings.model_copy(update={"vllm_base_url": english_llm.base_url,
                                                              "llm_timeout_s": 30.0}))
    _, sender = make_http_bot(engine=engine, vllm_base_url=english_llm.base_url)
    sender.event(dm("1700000305.000100", KV_CACHE_LOG), "Ev0ZHLLM")
    text = text_of(final_answer(fake_slack, "1700000305.000100", until=lambda t: "LLM 没有用中文回答" in t))
    assert english_llm.chat_requests, "the LLM was never asked"
    prompt = json.dumps(english_llm.chat_requests[0]["messages"], ensure_ascii=False)
    assert "Simplified Chinese" in prompt  # the LLM was asked for Chinese
    case = engine.case(KV_CACHE_CASE)
    assert case.fix[0].text_zh in text and "The KV cache had no room left" not in text
    assert "来自知识库" in text


# -- the other surfaces: help, usage, /vllm-diagnose summaries (the KB case form: tests/kb_growth) -------------


def test_diagnose_help_and_usage_follow_the_users_locale(http_bot: Any, fake_slack: FakeSlack) -> None:
    fake_slack.locales["U0ZHUSER1"] = "zh-CN"
    _, sender = http_bot
    zh = text_of(sender.command("/vllm-diagnose", "help", response_url="http://127.0.0.1:9/unused",
                                user="U0ZHUSER1").json()["blocks"])
    assert "询问一段日志" in zh and "检查 GPU 主机" in zh and "已解决" in zh and "`/vllm-explain <日志>`" in zh
    for english in ("Ask about a log", "Check a GPU host", "On every answer", "Fixed it"):
        assert english not in zh
    usage = sender.command("/vllm-explain", "", response_url="http://127.0.0.1:9/unused", user="U0ZHUSER1").json()
    assert usage["text"].startswith("用法：`/vllm-explain")
    unconfigured = sender.command("/vllm-diagnose", "gpu-01", response_url="http://127.0.0.1:9/unused",
                                  user="U0ZHUSER1").json()
    assert "还没有配置主机诊断" in unconfigured["text"]
    en = text_of(sender.command("/vllm-diagnose", "help", response_url="http://127.0.0.1:9/unused",
                                user="U0ENUSER1").json()["blocks"])  # en-US, Slack's default
    assert "Ask about a log" in en and "Fixed it" in en and "询问" not in en
    assert [c.params["user"] for c in fake_slack.calls_to("users.info")] == ["U0ZHUSER1", "U0ENUSER1"]  # cached


def test_a_chinese_users_vllm_diagnose_summary_is_chinese(make_http_bot: Any, fake_slack: FakeSlack,
                                                          tmp_path: Any) -> None:
    from host_support import final_report, unreachable_runner_settings

    from bot.settings import RunnerAccessRule

    fake_slack.locales["U0ZHUSER1"] = "zh-CN"
    rules = [RunnerAccessRule(hosts=["*"], users=["U0ZHUSER1", "U0ENUSER1"], max_tier=1)]
    _, sender = make_http_bot(**unreachable_runner_settings(tmp_path, rules))
    assert sender.command("/vllm-diagnose", "fleet", response_url=fake_slack.response_url(1),
                          user="U0ZHUSER1").status == 200
    zh = final_report(fake_slack)
    progress = fake_slack.calls_to("chat.postMessage")[0].params
    assert "正在对 *fleet* 运行只读检查" in text_of(progress["blocks"]) and "2 台主机" in text_of(progress["blocks"])
    text = text_of(zh.params["blocks"])
    assert "发现 2 个问题" in text and "2 台主机" in text and "命令的原始输出在本帖的文件中" in text
    assert "problems found" not in text and "Raw command outputs" not in text
    assert "发现 2 个问题" in zh.params["text"]  # the notification text too
    assert sender.command("/vllm-diagnose", "fleet", response_url=fake_slack.response_url(2),
                          user="U0ENUSER1").status == 200
    en = text_of(final_report(fake_slack, count=2).params["blocks"])
    assert "2 problems found" in en and "Raw command outputs" in en and "发现" not in en
