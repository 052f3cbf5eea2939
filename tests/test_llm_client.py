"""bot.explain.llm against a fake OpenAI-compatible server over real HTTP: discovery and the mapping of every
fault to LLMUnavailable(kind) with a one-line reason. The same mapping is checked against the real vLLM
server (prompt too long, unknown model, killed server) in tests/test_llm_vllm.py."""

from __future__ import annotations

import time

import pytest
from llm_support import Drop, FakeOpenAIServer, Hang, Reply, Stream, completion, error
from vllm_server import free_port

from bot.errors import LLMUnavailable
from bot.explain.llm import DEFAULT_CONTEXT_TOKENS, ChatResult, LLMClient

MSGS = [{"role": "user", "content": "hello"}]


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


@pytest.fixture
def fake():
    with FakeOpenAIServer() as server:
        yield server


def test_discovers_model_and_context_length(fake):
    fake.models.append({"id": "other", "object": "model", "max_model_len": 999})
    client = LLMClient(fake.base_url)
    info = client.server_info(soon())
    assert (info.model, info.max_model_len, info.served, info.reported_len) == (
        "fake",
        4096,
        ("fake", "other"),
        True,
    )
    # cached: a second call does not ask again
    client.server_info(soon())
    assert sum(r.path.endswith("/models") for r in fake.requests) == 1


def test_configured_model_is_used_and_checked(fake):
    fake.models.append({"id": "other", "object": "model", "max_model_len": 999})
    assert LLMClient(fake.base_url, model="other").server_info(soon()).max_model_len == 999
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url, model="missing").server_info(soon())
    assert exc.value.kind == "unknown_model"
    assert "'missing' is not served" in str(exc.value) and "fake" in str(exc.value)


def test_context_length_assumed_when_not_reported():
    with FakeOpenAIServer(max_model_len=None) as fake:
        info = LLMClient(fake.base_url).server_info(soon())
    assert info.max_model_len == DEFAULT_CONTEXT_TOKENS and not info.reported_len


def test_empty_model_list(fake):
    fake.models.clear()
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).server_info(soon())
    assert exc.value.kind == "unknown_model"


def test_api_key_is_sent(fake):
    LLMClient(fake.base_url, api_key="team-key-123").server_info(soon())
    headers = {k.lower(): v for k, v in fake.requests[-1].headers.items()}
    assert headers["authorization"] == "Bearer team-key-123"


def test_tokenize_counts_and_detects_absence(fake):
    client = LLMClient(fake.base_url)
    assert client.count_tokens(MSGS, "fake", soon()) == fake.count(MSGS)
    body = fake.requests[-1].body
    assert fake.requests[-1].path == "/tokenize" and body["add_generation_prompt"] is True
    fake.tokenize = False
    other = LLMClient(fake.base_url)
    assert other.count_tokens(MSGS, "fake", soon()) is None
    assert other.count_tokens(MSGS, "fake", soon()) is None
    assert sum(r.path == "/tokenize" for r in fake.requests) == 2  # remembered: asked once, not twice


def test_chat_returns_text_and_usage(fake):
    fake.chat = completion("hi there", finish_reason="length")
    out = LLMClient(fake.base_url).chat(
        MSGS, model="fake", max_tokens=16, deadline=soon(), schema={"type": "object"}
    )
    assert (out.text, out.finish_reason, out.prompt_tokens, out.completion_tokens) == (
        "hi there",
        "length",
        10,
        20,
    )
    sent = fake.chat_requests()[-1].body
    assert sent["max_tokens"] == 16
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"] == {"type": "object"}


def test_chat_without_schema_sends_no_response_format(fake):
    LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=soon())
    assert "response_format" not in fake.chat_requests()[-1].body


@pytest.mark.parametrize(
    ("reply", "kind", "fragment"),
    [
        (
            error(500, "Internal Server Error", type_="InternalServerError"),
            "server_error",
            "server error 500",
        ),
        (
            error(503, "engine dead", type_="ServiceUnavailable"),
            "server_error",
            "server error 503: engine dead",
        ),
        (
            error(
                400,
                "This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 input "
                "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the "
                "input prompt. (parameter=input_tokens, value=2049)",
                param="input_tokens",
            ),
            "prompt_too_long",
            "maximum context length is 2048",
        ),
        (
            error(
                404,
                "The model `nope` does not exist. Valid aliases: tiny.",
                param="model",
                type_="NotFoundError",
            ),
            "unknown_model",
            "The model `nope` does not exist",
        ),
        (error(401, "Unauthorized", type_="Unauthorized"), "auth", "VLLM_API_KEY"),
        (error(429, "too many requests", type_="RateLimit"), "overloaded", "429"),
        (
            error(
                400, "response_format json_schema is not supported by this server", param="response_format"
            ),
            "unsupported",
            "structured outputs not accepted",
        ),
        (
            error(400, "temperature must be non-negative, got -1.0.", param="temperature"),
            "bad_request",
            "400",
        ),
        (Reply("this is not json", status=200), "bad_response", ""),
    ],
    ids=["500", "503", "too-long", "unknown-model", "401", "429", "schema-rejected", "400", "garbage"],
)
def test_status_errors_are_mapped(fake, reply, kind, fragment):
    fake.chat = reply
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=soon())
    assert exc.value.kind == kind, str(exc.value)
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value) and len(str(exc.value)) <= 200


def test_error_reason_is_redacted(fake):
    secret = "hf_" + "Q" * 34
    fake.chat = error(500, f"failed to load with token {secret}")
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=soon())
    assert secret not in str(exc.value) and "[REDACTED:hf-token]" in str(exc.value)


def test_connection_refused_is_a_connection_error_not_a_timeout():
    client = LLMClient(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(LLMUnavailable) as exc:
        client.server_info(soon(60))  # a retry loop would end in "timeout" at this deadline
    assert exc.value.kind == "connection"
    assert "Connection refused" in str(exc.value)


def test_dropped_connection(fake):
    fake.chat = Drop()
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=soon())
    assert exc.value.kind == "connection"


def test_hanging_server_times_out_at_the_deadline(fake):
    fake.chat = Hang(30)  # then it closes: a client without a deadline would report "connection"
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=soon(0.8))
    assert exc.value.kind == "timeout"
    assert len(fake.chat_requests()) == 1  # sent first, then given up at the deadline (not refused up front)


def test_deadline_already_passed_sends_nothing(fake):
    with pytest.raises(LLMUnavailable) as exc:
        LLMClient(fake.base_url).chat(MSGS, model="fake", max_tokens=8, deadline=time.monotonic() - 1)
    assert exc.value.kind == "timeout"
    assert fake.chat_requests() == []


def test_stream_yields_pieces_and_usage(fake):
    fake.chat = Stream(["Hel", "lo", " world"], finish_reason="stop")
    result = ChatResult()
    pieces = list(
        LLMClient(fake.base_url).chat_stream(
            MSGS, model="fake", max_tokens=8, deadline=soon(), stall_s=2, result=result
        )
    )
    assert pieces == ["Hel", "lo", " world"]
    assert (result.text, result.finish_reason, result.completion_tokens) == ("Hello world", "stop", 3)
    assert result.first_chunk_ms is not None and result.chunks >= 4
    assert fake.chat_requests()[-1].body["stream"] is True


def test_stalled_stream_fails_after_stall_time(fake):
    fake.chat = Stream(["a", "b", "c", "d"], stall_after=2)
    result = ChatResult()
    got = []
    with pytest.raises(LLMUnavailable) as exc:
        for piece in LLMClient(fake.base_url).chat_stream(
            MSGS, model="fake", max_tokens=8, deadline=soon(30), stall_s=0.6, result=result
        ):
            got.append(piece)
    assert got == ["a", "b"]
    assert exc.value.kind == "stalled"  # the server holds the stream 60 s: "timeout" would mean no stall timer


def test_stream_dropped_mid_way(fake):
    fake.chat = Stream(["a", "b", "c", "d"], drop_after=2)
    got = []
    with pytest.raises(LLMUnavailable) as exc:
        for piece in LLMClient(fake.base_url).chat_stream(
            MSGS, model="fake", max_tokens=8, deadline=soon(), stall_s=2, result=ChatResult()
        ):
            got.append(piece)
    assert got == ["a", "b"]
    assert exc.value.kind == "connection"


def test_stream_error_before_first_chunk(fake):
    fake.chat = error(404, "The model `fake` does not exist. Valid aliases: x.", param="model")
    client = LLMClient(fake.base_url)
    client.server_info(soon())
    with pytest.raises(LLMUnavailable) as exc:
        list(
            client.chat_stream(
                MSGS, model="fake", max_tokens=8, deadline=soon(), stall_s=2, result=ChatResult()
            )
        )
    assert exc.value.kind == "unknown_model"
    assert client.cached_info is None  # forgotten: the server may have restarted with another model
