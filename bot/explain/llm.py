"""Thin client for the team's OpenAI-compatible vLLM server. The only module that imports `openai`.

Everything here is bounded by a caller-supplied deadline (time.monotonic() value) and every failure
becomes `bot.errors.LLMUnavailable` with a one-line reason and a `kind`:

    connection       nothing listens / connection reset (server killed)      APIConnectionError
    timeout          no answer before the deadline                           APITimeoutError
    stalled          a stream sent nothing for `stall_s`                      read timeout while streaming
    server_error     5xx                                                      InternalServerError & co
    prompt_too_long  400 "maximum context length"                             BadRequestError
    unsupported      400 about response_format / structured outputs           BadRequestError
    unknown_model    404 "The model `x` does not exist", or not in /v1/models NotFoundError
    auth             401 / 403
    overloaded       429
    bad_request      any other 4xx
    bad_response     the body was not what the OpenAI API promises

Retries are off (max_retries=0): the caller falls back to the KB answer instead of waiting longer.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.diagnosis.redact import redact
from bot.errors import LLMUnavailable

CONNECT_TIMEOUT_S = 3.0
DEFAULT_CONTEXT_TOKENS = 4096  # assumed when /v1/models does not report max_model_len (non-vLLM servers)


@dataclass(frozen=True)
class ServerInfo:
    model: str
    max_model_len: int
    served: tuple[str, ...]  # every model id the server lists
    reported_len: bool = True  # False when max_model_len was assumed


@dataclass
class ChatResult:
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    elapsed_ms: float = 0.0
    first_chunk_ms: float | None = None
    chunks: int = 0


@dataclass
class _Flags:
    tokenize_supported: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(redact(str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise LLMUnavailable("no answer within the time limit", kind="timeout")
    return left


def _timeout(deadline: float, read: float | None = None) -> openai.Timeout:
    left = _remaining(deadline)
    return openai.Timeout(min(read, left) if read else left, connect=min(CONNECT_TIMEOUT_S, left))


class LLMClient:
    """One OpenAI-compatible endpoint. Thread-safe: the Slack bot explains from a worker pool."""

    def __init__(self, base_url: str, *, api_key: str | None = None, model: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.root_url = re.sub(r"/v1$", "", self.base_url)  # vLLM's /tokenize and /health live at the root
        self.configured_model = model
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "EMPTY",  # vLLM without --api-key accepts anything; the client insists on one
            max_retries=0,
            timeout=openai.Timeout(30.0, connect=CONNECT_TIMEOUT_S),
        )
        self._info: ServerInfo | None = None
        self._flags = _Flags()

    def close(self) -> None:
        self._client.close()

    # -- discovery ---------------------------------------------------------------------------------
    def server_info(self, deadline: float) -> ServerInfo:
        """The model to use and its context length, from /v1/models (cached until an error resets it)."""
        info = self._info
        if info is not None:
            return info
        try:
            page = self._client.models.list(timeout=_timeout(deadline))
            entries = list(page.data)
        except openai.APIError as exc:
            raise map_error(exc, self.base_url) from exc
        except ValueError as exc:
            raise LLMUnavailable(
                _one_line(f"unreadable model list from {self.base_url}: {exc}"), "bad_response"
            ) from exc
        if not entries:
            raise LLMUnavailable(f"{self.base_url}/models lists no model", kind="unknown_model")
        served = tuple(e.id for e in entries)
        wanted = self.configured_model or served[0]
        if wanted not in served:
            raise LLMUnavailable(
                _one_line(f"model {wanted!r} is not served at {self.base_url} (served: {', '.join(served)})"),
                kind="unknown_model",
            )
        entry = entries[served.index(wanted)]
        extra = getattr(entry, "model_extra", None) or {}
        max_len = extra.get("max_model_len")
        info = ServerInfo(
            model=wanted,
            max_model_len=int(max_len)
            if isinstance(max_len, int) and max_len > 0
            else DEFAULT_CONTEXT_TOKENS,
            served=served,
            reported_len=isinstance(max_len, int) and max_len > 0,
        )
        self._info = info
        return info

    @property
    def cached_info(self) -> ServerInfo | None:
        """What the last successful discovery found; no network."""
        return self._info

    def forget_server_info(self) -> None:
        """After a 404 for the model or a lost connection: the server may have restarted with another model."""
        self._info = None

    # -- token counting ------------------------------------------------------------------------------
    def count_tokens(self, messages: list[dict[str, str]], model: str, deadline: float) -> int | None:
        """Exact prompt tokens (chat template included) from vLLM's /tokenize; None when the server has
        no such endpoint (then the caller estimates)."""
        if not self._flags.tokenize_supported:
            return None
        body = {
            "model": model,
            "messages": messages,
            "add_generation_prompt": True,
            "add_special_tokens": False,
        }
        try:
            out = self._client.post(
                f"{self.root_url}/tokenize",
                cast_to=object,
                body=body,
                options={"timeout": _timeout(deadline)},
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (404, 405, 501):
                with self._flags.lock:
                    self._flags.tokenize_supported = False
                return None
            raise map_error(exc, self.base_url) from exc
        except openai.APIError as exc:
            raise map_error(exc, self.base_url) from exc
        except ValueError:
            out = None
        count = out.get("count") if isinstance(out, dict) else None
        if not isinstance(count, int):
            with self._flags.lock:
                self._flags.tokenize_supported = False
            return None
        return count

    # -- chat ----------------------------------------------------------------------------------------
    def _request(
        self,
        messages: list[dict[str, str]],
        model: str,
        max_tokens: int,
        schema: dict[str, Any] | None,
        temperature: float,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "explanation", "schema": schema, "strict": True},
            }
        return kwargs

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        model: str,
        max_tokens: int,
        deadline: float,
        schema: dict[str, Any] | None = None,
        temperature: float = 0.2,
    ) -> ChatResult:
        started = time.monotonic()
        try:
            resp = self._client.chat.completions.create(
                **self._request(messages, model, max_tokens, schema, temperature), timeout=_timeout(deadline)
            )
        except openai.APIError as exc:
            raise self._fail(exc) from exc
        except ValueError as exc:  # a body that is not JSON surfaces as a raw decode error
            raise LLMUnavailable(
                _one_line(f"unreadable answer from {self.base_url}: {exc}"), "bad_response"
            ) from exc
        if not resp.choices:
            raise LLMUnavailable("the server answered with no choices", kind="bad_response")
        choice = resp.choices[0]
        usage = resp.usage
        return ChatResult(
            text=choice.message.content or "",
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            elapsed_ms=(time.monotonic() - started) * 1000,
        )

    def chat_stream(
        self,
        messages: list[dict[str, str]],
        *,
        model: str,
        max_tokens: int,
        deadline: float,
        stall_s: float,
        result: ChatResult,
        schema: dict[str, Any] | None = None,
        temperature: float = 0.2,
    ) -> Iterator[str]:
        """Yield content deltas. `result` is filled in as the stream goes (finish reason, usage, timings).
        A gap longer than `stall_s` between two chunks, or passing the deadline, raises LLMUnavailable."""
        started = time.monotonic()
        try:
            stream = self._client.chat.completions.create(
                **self._request(messages, model, max_tokens, schema, temperature),
                stream=True,
                stream_options={"include_usage": True},
                timeout=_timeout(deadline, read=stall_s),
            )
        except openai.APIError as exc:
            raise self._fail(exc, stalled_after=stall_s) from exc
        try:
            for chunk in stream:
                if time.monotonic() > deadline:
                    raise LLMUnavailable("no complete answer within the time limit", kind="timeout")
                result.chunks += 1
                if result.first_chunk_ms is None:
                    result.first_chunk_ms = (time.monotonic() - started) * 1000
                if chunk.usage is not None:
                    result.prompt_tokens = chunk.usage.prompt_tokens
                    result.completion_tokens = chunk.usage.completion_tokens
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
                piece = choice.delta.content if choice.delta else None
                if piece:
                    result.text += piece
                    yield piece
            if result.finish_reason is None:
                # a server killed mid-answer closes the connection; the SSE reader just sees the end
                self.forget_server_info()
                raise LLMUnavailable(
                    f"the answer stream from {self.base_url} ended before the answer was complete",
                    "connection",
                )
        except openai.APIError as exc:
            raise self._fail(exc, stalled_after=stall_s) from exc
        except LLMUnavailable:
            raise
        except Exception as exc:  # the transport's own errors surface raw while a stream is being read
            raise self._fail_transport(exc, stall_s) from exc
        finally:
            stream.close()
            result.elapsed_ms = (time.monotonic() - started) * 1000

    # -- errors --------------------------------------------------------------------------------------
    def _fail(self, exc: openai.APIError, stalled_after: float | None = None) -> LLMUnavailable:
        err = map_error(exc, self.base_url, stalled_after=stalled_after)
        if err.kind in ("unknown_model", "connection"):
            self.forget_server_info()
        return err

    def _fail_transport(self, exc: Exception, stall_s: float) -> LLMUnavailable:
        name = type(exc).__name__
        if "Timeout" in name:
            return LLMUnavailable(f"the answer stream stalled (nothing for {stall_s:g} s)", kind="stalled")
        if any(k in name for k in ("Protocol", "Read", "Connect", "Network", "Closed", "Incomplete")):
            self.forget_server_info()
            return LLMUnavailable(
                _one_line(f"connection lost while streaming from {self.base_url}: {name}"), "connection"
            )
        return LLMUnavailable(
            _one_line(f"unexpected error while streaming: {name}: {exc}"), kind="bad_response"
        )


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return exc.message


_TOO_LONG = re.compile(
    r"maximum context length|context length|too long|exceeds? (?:the )?(?:max|limit)", re.I
)
_STRUCTURED = re.compile(r"response_format|json_schema|structured|guided|grammar|xgrammar", re.I)


def map_error(exc: openai.APIError, base_url: str, *, stalled_after: float | None = None) -> LLMUnavailable:
    """Turn an openai exception into LLMUnavailable with a one-line, redacted reason."""
    if isinstance(exc, openai.APITimeoutError):
        if stalled_after is not None:
            return LLMUnavailable(
                f"the answer stream stalled or timed out (limit {stalled_after:g} s)", "stalled"
            )
        return LLMUnavailable(f"no answer from {base_url} within the time limit", kind="timeout")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = str(cause) if cause else str(exc)
        why = re.sub(r"^\[Errno \d+\]\s*", "", why) or type(cause).__name__
        return LLMUnavailable(_one_line(f"cannot reach {base_url}: {why}"), kind="connection")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        msg = _server_message(exc)
        if status >= 500:
            return LLMUnavailable(_one_line(f"server error {status}: {msg}"), kind="server_error")
        if status == 404:
            kind = "unknown_model" if ("model" in msg.lower() or _param(exc) == "model") else "bad_request"
            return LLMUnavailable(_one_line(f"404: {msg}"), kind=kind)
        if status in (401, 403):
            return LLMUnavailable(
                f"the server rejected the API key ({status}); check VLLM_API_KEY", kind="auth"
            )
        if status == 429:
            return LLMUnavailable(_one_line(f"the server is overloaded (429): {msg}"), kind="overloaded")
        if status == 400 and (_param(exc) in ("input_tokens", "input_text") or _TOO_LONG.search(msg)):
            return LLMUnavailable(_one_line(f"prompt too long for the model: {msg}"), kind="prompt_too_long")
        if status == 400 and _STRUCTURED.search(msg):
            return LLMUnavailable(_one_line(f"structured outputs not accepted: {msg}"), kind="unsupported")
        return LLMUnavailable(_one_line(f"request rejected ({status}): {msg}"), kind="bad_request")
    return LLMUnavailable(_one_line(f"unexpected answer from {base_url}: {exc}"), kind="bad_response")


def _param(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            p = inner.get("param")
            return str(p) if p is not None else None
    return None
