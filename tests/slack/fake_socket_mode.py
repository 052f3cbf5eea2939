"""A Socket Mode server for tests (aiohttp WebSocket in its own thread and loop), as bolt-python's own
adapter tests do: it says hello, pushes envelopes the test queues, and records what the bot sends back
(acks with their envelope_id) with the time they arrived."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import WSMsgType, web


class FakeSocketMode:
    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._sockets: list[web.WebSocketResponse] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-socket-mode", daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def start(self) -> FakeSocketMode:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/link", self._link)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}/link"

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self._cond:
            self._sockets.append(ws)
            self.connections += 1
            self._cond.notify_all()
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1, "debug_info": {"host": "fake"}}))
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                with self._cond:
                    self.received.append((time.monotonic(), json.loads(msg.data)))
                    self._cond.notify_all()
        with self._cond:
            if ws in self._sockets:
                self._sockets.remove(ws)
        return ws

    def wait_connected(self, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._sockets, timeout=timeout):
                raise AssertionError("the bot never opened the Socket Mode WebSocket")

    def send(self, envelope: dict[str, Any]) -> float:
        """Push one envelope to the connected bot; returns the send time (monotonic)."""
        sent = time.monotonic()

        async def _send() -> None:
            await self._sockets[-1].send_str(json.dumps(envelope))

        asyncio.run_coroutine_threadsafe(_send(), self._loop).result(timeout=5)
        return sent

    def wait_ack(self, envelope_id: str, timeout: float = 5.0) -> tuple[float, dict[str, Any]]:
        def find() -> tuple[float, dict[str, Any]] | None:
            return next(((t, m) for t, m in self.received if m.get("envelope_id") == envelope_id), None)

        with self._cond:
            if not self._cond.wait_for(lambda: find() is not None, timeout=timeout):
                raise AssertionError(f"no ack for envelope {envelope_id}; got {[m for _, m in self.received]}")
            result = find()
            assert result is not None
            return result

    def stop(self) -> None:
        async def _stop() -> None:
            for ws in list(self._sockets):
                await ws.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # a loop left open warns (ResourceWarning) when the GC takes it
            self._loop.close()
