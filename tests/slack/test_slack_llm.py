"""The LLM explanation in Slack: edited into the answer progressively (throttled), escaped, and with the
real CPU vLLM server end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from fake_slack import FakeSlack
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG
from vllm_support import vllm_server  # noqa: F401 - session fixture: the real vLLM CPU server

from bot.pipeline import Pipeline

INJECTED = "<!channel> <!here> <@U0EVIL99> <https://evil.example|login>"


def dm(ts: str) -> dict[str, Any]:
    text = KV_CACHE_LOG.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": "U0ALICE1", "text": text,
            "ts": ts, "event_ts": ts}


def answer_updates(fake: FakeSlack, ts: str, until: Any, timeout: float = 120) -> list[Any]:
    def done(calls: list[Any]) -> bool:
        placeholder = next((c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                            and c.params.get("_ts")), None)
        if placeholder is None:
            return False
        updates = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == placeholder.params["_ts"]]
        return bool(updates) and until(updates[-1])

    calls = fake.wait_for(done, timeout=timeout)
    placeholder_ts = next(c for c in calls if c.method == "chat.postMessage" and c.params.get("_ts")).params["_ts"]
    return [c for c in calls if c.method == "chat.update" and c.params.get("ts") == placeholder_ts]


def source_text(update: Any) -> str:
    return json.dumps(next(b for b in update.params["blocks"] if b.get("block_id") == "source"))


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    answer = {
        "case_id": KV_CACHE_CASE,
        "summary": f"{INJECTED} The KV cache had no room left after loading the weights.",
        "why": f"Everything was used by weights and activations. {INJECTED}",
        "fix_steps": [f"Raise --gpu-memory-utilization to 0.95 {INJECTED}", "Lower --max-model-len."],
        "confidence": "high",
    }
    server = FakeOpenAI(answer, pieces=20, delay_s=0.05).start()
    yield server
    server.stop()


def test_llm_text_is_streamed_into_the_answer_and_never_pings(make_http_bot: Any, fake_slack: FakeSlack,
                                                             fake_llm: FakeOpenAI, settings: Any) -> None:
    llm_settings = settings.model_copy(update={"vllm_base_url": fake_llm.base_url, "llm_timeout_s": 30.0})
    engine = Pipeline.from_settings(llm_settings)
    _, sender = make_http_bot(engine=engine, vllm_base_url=fake_llm.base_url)
    ts = "1700000200.000100"
    sender.event(dm(ts), "Ev0LLM1")
    updates = answer_updates(fake_slack, ts, lambda u: "Explained by the team" in source_text(u))

    first, final = updates[0], updates[-1]
    assert "Writing a tailored explanation" in json.dumps(first.params["blocks"], ensure_ascii=False)  # KB answer shown at once
    streaming = [u for u in updates if "(writing…)" in json.dumps(u.params["blocks"], ensure_ascii=False)]
    assert streaming, "the LLM text was not shown while it was being written"
    assert len(updates) < 20  # throttled: not one edit per token
    why = next(b for b in final.params["blocks"] if b.get("block_id") == "why")["text"]["text"]
    assert "The KV cache had no room left" in why and "&lt;!channel&gt;" in why
    assert fake_slack.special_mentions() == []
    assert fake_llm.requests, "the LLM was never asked"


def test_llm_down_keeps_the_kb_answer_with_a_note(make_http_bot: Any, fake_slack: FakeSlack, settings: Any) -> None:
    dead = "http://127.0.0.1:9/v1"  # nothing listens on port 9
    engine = Pipeline.from_settings(settings.model_copy(update={"vllm_base_url": dead, "llm_timeout_s": 5.0}))
    _, sender = make_http_bot(engine=engine, vllm_base_url=dead)
    ts = "1700000201.000100"
    sender.event(dm(ts), "Ev0LLMDOWN")
    updates = answer_updates(fake_slack, ts, lambda u: "LLM unavailable" in source_text(u), timeout=60)
    final = updates[-1]
    assert KV_CACHE_CASE in json.dumps(final.params["blocks"])
    assert "fix" in [b.get("block_id") for b in final.params["blocks"]]


@pytest.mark.vllm
def test_paste_to_answer_with_the_real_vllm_server(make_http_bot: Any, fake_slack: FakeSlack, settings: Any,
                                                   vllm_server: Any) -> None:  # noqa: F811
    """Real CPU vLLM (tiny random-weight model): the answer is the KB case, and the LLM step either gives
    a schema-valid explanation or a KB answer with a note; either way nothing unescaped is posted."""
    llm_settings = settings.model_copy(update={"vllm_base_url": vllm_server.base_url, "llm_timeout_s": 60.0})
    engine = Pipeline.from_settings(llm_settings)
    _, sender = make_http_bot(engine=engine, vllm_base_url=vllm_server.base_url)
    ts = "1700000202.000100"
    sender.event(dm(ts), "Ev0VLLM")
    updates = answer_updates(
        fake_slack, ts,
        lambda u: "The LLM is writing" not in source_text(u) and "Writing a tailored" not in json.dumps(u.params["blocks"]),
        timeout=180,
    )
    final = updates[-1]
    assert KV_CACHE_CASE in json.dumps(final.params["blocks"])
    assert "Explained by the team" in source_text(final) or "knowledge base" in source_text(final)
    assert fake_slack.special_mentions() == []
    assert not [c for c in fake_slack.calls if c.params.get("_rejected")]
