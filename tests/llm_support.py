"""A small fake OpenAI-compatible server (real HTTP on 127.0.0.1) for the LLM error paths, plus builders
of hand-made Diagnosis objects. Behaviour is scripted per test; every request is recorded.

The real vLLM server is used for everything else (tests/test_llm_vllm.py); this one exists because a
real server cannot be made to answer 500, hang, stall half-way or emit invalid JSON on demand.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bot.models import Diagnosis, Distilled, LogLine, Match


# --- scripted replies -------------------------------------------------------------------------------
@dataclass
class Reply:
    """A plain JSON answer."""

    body: Any
    status: int = 200
    delay_s: float = 0.0


@dataclass
class Stream:
    """An SSE answer: `pieces` of content, one chunk each. `stall_after` chunks → stop sending (keep the
    connection open); `drop_after` chunks → close the connection without finishing (a crash)."""

    pieces: list[str]
    finish_reason: str = "stop"
    delay_s: float = 0.0
    stall_after: int | None = None
    drop_after: int | None = None


@dataclass
class Hang:
    """Accept the request and say nothing for `seconds` (then close)."""

    seconds: float = 30.0


class Drop:
    """Close the connection without any answer."""


def completion(content: str, *, finish_reason: str = "stop", model: str = "fake") -> Reply:
    return Reply(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }
    )


def error(status: int, message: str, *, param: str | None = None, type_: str = "BadRequestError") -> Reply:
    """An error body in vLLM's format."""
    return Reply(
        {"error": {"message": message, "type": type_, "param": param, "code": status}}, status=status
    )


def answer_json(case_id: str, **overrides: Any) -> str:
    data = {
        "case_id": case_id,
        "summary": "The KV cache has no memory left after loading the weights.",
        "why": "L12 shows vLLM found no memory for cache blocks after profiling.",
        "fix_steps": ["Raise --gpu-memory-utilization to 0.95.", "Lower --max-model-len."],
        "confidence": "high",
    }
    data.update(overrides)
    return json.dumps(data)


@dataclass
class Recorded:
    method: str
    path: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class FakeOpenAIServer:
    """`chat` decides the answer to each chat request: a Reply/Stream/Hang/Drop, or a callable taking
    the request body and returning one. `tokenize` False answers 404 on /tokenize (a non-vLLM server)."""

    def __init__(self, *, model: str = "fake", max_model_len: int | None = 4096):
        self.models: list[dict[str, Any]] = [{"id": model, "object": "model", "owned_by": "test"}]
        if max_model_len is not None:
            self.models[0]["max_model_len"] = max_model_len
        self.chat: Reply | Stream | Hang | Drop | Callable[[dict], Any] = completion(answer_json("none"))
        self.models_reply: Reply | None = None  # overrides /v1/models when set
        self.tokenize = True
        self.chars_per_token = 4.0  # the fake tokenizer: ceil(chars / 4) over all message contents
        self.requests: list[Recorded] = []
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def count(self, messages: list[dict[str, Any]]) -> int:
        chars = sum(len(str(m.get("content", ""))) for m in messages)
        return int(chars / self.chars_per_token) + 1

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    # -- HTTP ----------------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    return json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    return raw.decode("utf-8", "replace")

            def _send_json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode() if not isinstance(body, bytes | str) else str(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.requests.append(Recorded("GET", self.path, None, dict(self.headers)))
                if self.path.endswith("/models"):
                    if fake.models_reply is not None:
                        self._send_json(fake.models_reply.status, fake.models_reply.body)
                    else:
                        self._send_json(200, {"object": "list", "data": fake.models})
                elif self.path == "/health":
                    self._send_json(200, {})
                else:
                    self._send_json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = self._body()
                fake.requests.append(Recorded("POST", self.path, body, dict(self.headers)))
                if self.path == "/tokenize":
                    if not fake.tokenize:
                        self._send_json(404, {"detail": "Not Found"})
                        return
                    n = fake.count(body.get("messages", []))
                    self._send_json(200, {"count": n, "max_model_len": fake.models[0].get("max_model_len")})
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send_json(404, {"detail": "Not Found"})
                    return
                reply = fake.chat(body) if callable(fake.chat) else fake.chat
                self._answer(reply, body)

            def _answer(self, reply: Any, body: Any) -> None:
                if isinstance(reply, Drop):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if isinstance(reply, Hang):
                    fake._closing.wait(reply.seconds)
                    self.close_connection = True
                    return
                if isinstance(reply, Reply):
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    self._send_json(reply.status, reply.body)
                    return
                if isinstance(reply, Stream):
                    self._stream(reply, body)
                    return
                raise TypeError(f"unknown scripted reply {reply!r}")

            def _stream(self, s: Stream, body: Any) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

                def event(obj: Any) -> None:
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                    self.wfile.flush()

                base = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "fake",
                }
                event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                for n, piece in enumerate(s.pieces):
                    if s.stall_after is not None and n >= s.stall_after:
                        fake._closing.wait(60)
                        return
                    if s.drop_after is not None and n >= s.drop_after:
                        self.connection.shutdown(2)
                        return
                    if s.delay_s:
                        time.sleep(s.delay_s)
                    last = n == len(s.pieces) - 1
                    choice = {
                        "index": 0,
                        "delta": {"content": piece},
                        "finish_reason": s.finish_reason if last else None,
                    }
                    event({**base, "choices": [choice]})
                event(
                    {
                        **base,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 10,
                            "completion_tokens": len(s.pieces),
                            "total_tokens": 10 + len(s.pieces),
                        },
                    }
                )
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler


def split(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- hand-made diagnoses ------------------------------------------------------------------------------
def make_diagnosis(
    *,
    case_ids: tuple[str, ...] = ("kv-cache-no-memory", "max-model-len-exceeds-kv-cache"),
    verdict: str = "match",
    language: str = "en",
    evidence: tuple[LogLine, ...] | None = None,
    total_lines: int = 40,
) -> Diagnosis:
    if evidence is None:
        evidence = (
            LogLine(
                10,
                "INFO 11-18 18:07:20 [model_runner.py:1100] Loading model weights took 14.99 GiB",
                "context",
            ),
            LogLine(
                11,
                'File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 493, in raise_if_cache_size_invalid',
                "frame",
            ),
            LogLine(
                12,
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.",
                "root",
            ),
        )
    distilled = Distilled(
        evidence=evidence,
        root_errors=tuple(e for e in evidence if e.kind == "root"),
        query="no available memory for the cache blocks",
        total_lines=total_lines,
        total_bytes=sum(len(e.text) for e in evidence),
        language=language,  # type: ignore[arg-type]
    )
    matches = tuple(
        Match(cid, cid.replace("-", " "), cid, "memory", round(0.9 - 0.3 * i, 2), i == 0)
        for i, cid in enumerate(case_ids)
    )
    return Diagnosis(verdict, matches, distilled)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=1)
def _kb_by_id() -> dict[str, Any]:
    from kb.loader import load_kb

    return load_kb(strict=False).by_id()


def kb_cases(*case_ids: str) -> list[Any]:
    """The real KB cases with these ids (the bundled kb/cases)."""
    by_id = _kb_by_id()
    return [by_id[c] for c in case_ids]
