"""A stdlib OpenAI-compatible server (what vLLM serves) that streams one scripted JSON answer slowly.

Plumbing for the Slack tests only: the real bot.explain.explainer / bot.explain.llm client talks to it over HTTP, so the
test sees exactly what the bot would post for an LLM answer carrying mention injections. Behaviour of
the real server is covered by the vLLM CPU test.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "chatops-llm"


class FakeOpenAI:
    def __init__(self, answer: dict[str, Any], pieces: int = 12, delay_s: float = 0.05) -> None:
        self.answer = answer
        self.pieces = pieces
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []  # every POST body (/tokenize too)
        self.chat_requests: list[dict[str, Any]] = []  # bodies of /v1/chat/completions only
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/v1/models":
            return self._json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "vllm", "max_model_len": 8192}]})
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.fake.requests.append(body)
        if self.path == "/tokenize":
            text = json.dumps(body.get("messages", []))
            return self._json(200, {"count": len(text) // 3, "max_model_len": 8192, "tokens": []})
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": {"message": "not found"}})
        self.fake.chat_requests.append(body)
        content = json.dumps(self.fake.answer, ensure_ascii=False)
        if not body.get("stream"):
            return self._json(200, {
                "id": "cmpl-1", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
            })
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        step = max(1, len(content) // self.fake.pieces)
        for i in range(0, len(content), step):
            self._event({"choices": [{"index": 0, "delta": {"content": content[i:i + step]}, "finish_reason": None}]})
            time.sleep(self.fake.delay_s)
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._event({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, fields: dict[str, Any]) -> None:
        chunk = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL, **fields}
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.flush()
