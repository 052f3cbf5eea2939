"""A fake Slack Web API over real HTTP (stdlib ThreadingHTTPServer on port 0), in the pattern bolt-python
tests itself with: it records every call and answers like Slack for the methods the bot uses.

It also behaves like Slack where the bot could get it wrong:
  * rejects blocks over Slack's limits with `invalid_blocks` (50 blocks a message, 100 a view, 3,000
    chars a section text, 150 a header, 10 context elements, 25 actions, 75 a button label);
  * marks messages whose `text` is over 40,000 chars as truncated (Slack cuts them);
  * answers 429 + Retry-After once for a method when told to (`rate_limit_once`);
  * serves files (files.info + the url_private_download) only with the bot token;
  * takes uploads (files.getUploadURLExternal → POST upload_url → files.completeUploadExternal);
  * sinks response_url POSTs and hands out apps.connections.open URLs for Socket Mode;
  * answers usergroups.users.list from `groups`, or `missing_scope` when "usergroups:read" is taken out
    of `scopes` (the scopes auth.test reports);
  * answers users.info with the user's `locale` from `locales` (only with include_locale, like Slack),
    or `missing_scope` when "users:read" is taken out of `scopes`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

SCOPES = ("chat:write", "commands", "app_mentions:read", "files:read", "files:write", "im:history",
          "usergroups:read", "users:read")
BOT_USER_ID = "UBOT0001"
BOT_ID = "BBOT0001"
TEAM_ID = "T0TEST01"
SPECIAL_MENTION_RE = re.compile(r"<!(?:channel|here|everyone|subteam)|<@U(?!BOT0001)|<https?://evil", re.I)


@dataclass
class Call:
    method: str  # "chat.postMessage", "upload", "response_url", "file_download", …
    params: dict[str, Any]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)


@dataclass
class FakeFile:
    id: str
    name: str
    content: bytes
    mimetype: str = "text/plain"
    filetype: str = "text"
    size: int | None = None  # what files.info claims (defaults to len(content))


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.files: dict[str, FakeFile] = {}
        self.thread_messages: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.socket_mode_url: str | None = None
        self.not_in_channels: set[str] = set()
        self.groups: dict[str, list[str]] = {}  # user group id (S…) → member user ids
        self.scopes: set[str] = set(SCOPES)
        self.locales: dict[str, str] = {}  # user id → Slack locale, e.g. "zh-CN" (others: "en-US")
        self.truncated: list[Call] = []
        self._rate_limit_once: dict[str, int] = {}
        self._release: threading.Event | None = None  # set: held calls go on (see holding())
        self.latency: dict[str, float] = {}  # method → seconds each call waits before its response
        self._hold_bound_s = 30.0
        self.held_too_long: list[str] = []
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/api/"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-slack", daemon=True)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeSlack:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- test controls -------------------------------------------------------------------------
    @contextlib.contextmanager
    def holding(self, bound_s: float = 30.0) -> Iterator[None]:
        """Every Web API call and response_url post made inside the block is recorded at once but answered
        only when the block ends. A request the bot answers inside the block was therefore acked without
        waiting for any Slack call of its work (ack before work: an ordering, not a stopwatch). A call
        still held after `bound_s` goes on and is listed in `held_too_long`."""
        self._release, self._hold_bound_s = threading.Event(), bound_s
        try:
            yield
        finally:
            self._release.set()
            self._release = None

    def _hold(self, method: str) -> None:
        if self.latency.get(method):  # a slow Slack for this method (recorded at once, answered later)
            time.sleep(self.latency[method])
        release = self._release
        if release is not None and not release.wait(self._hold_bound_s):
            self.held_too_long.append(method)

    def rate_limit_once(self, method: str, retry_after: int = 1) -> None:
        self._rate_limit_once[method] = retry_after

    def add_file(self, file: FakeFile) -> dict[str, Any]:
        self.files[file.id] = file
        return self.file_object(file)

    def file_object(self, file: FakeFile) -> dict[str, Any]:
        return {
            "id": file.id,
            "name": file.name,
            "title": file.name,
            "mimetype": file.mimetype,
            "filetype": file.filetype,
            "size": file.size if file.size is not None else len(file.content),
            "url_private": f"http://127.0.0.1:{self.port}/files/{file.id}/{file.name}",
            "url_private_download": f"http://127.0.0.1:{self.port}/files/{file.id}/download/{file.name}",
            "mode": "hosted",
        }

    def response_url(self, n: int | str = 1) -> str:
        return f"http://127.0.0.1:{self.port}/response/{n}"

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
            self.truncated.clear()

    # --- assertions ----------------------------------------------------------------------------
    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[Call]:
        """Wait until predicate(calls) is truthy; returns the calls. Raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                calls = list(self.calls)
                if predicate(calls):
                    return calls
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    summary = [(c.method, str(c.params)[:200]) for c in calls]
                    raise AssertionError(f"timed out waiting; calls so far: {summary}")
                self._changed.wait(timeout=min(remaining, 0.5))

    def wait_for_call(self, method: str, count: int = 1, timeout: float = 30.0, **match: Any) -> list[Call]:
        def enough(calls: list[Call]) -> bool:
            hits = [c for c in calls if c.method == method and all(c.params.get(k) == v for k, v in match.items())]
            return len(hits) >= count

        calls = self.wait_for(enough, timeout)
        return [c for c in calls if c.method == method and all(c.params.get(k) == v for k, v in match.items())]

    def posted_texts(self) -> list[str]:
        """Every string the bot sent for display: message text, blocks, views, response_url bodies."""
        out: list[str] = []
        with self._lock:
            calls = list(self.calls)
        for call in calls:
            if call.method in ("chat.postMessage", "chat.update", "chat.postEphemeral", "response_url", "views.open", "views.publish", "views.update"):
                out.extend(_strings(call.params))
        return out

    def special_mentions(self) -> list[str]:
        return [t for t in self.posted_texts() if SPECIAL_MENTION_RE.search(t)]

    # --- internals -----------------------------------------------------------------------------
    def _record(self, call: Call) -> None:
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ts):06d}"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# --- Slack's block limits ----------------------------------------------------------------------------


def block_errors(blocks: Any, max_blocks: int) -> list[str]:
    if isinstance(blocks, str):
        try:
            blocks = json.loads(blocks)
        except ValueError:
            return ["invalid JSON [json-pointer:/blocks]"]
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > max_blocks:
        errors.append(f"no more than {max_blocks} items allowed [json-pointer:/blocks]")
    for i, block in enumerate(blocks):
        where = f"/blocks/{i}"
        kind = block.get("type")
        if len(str(block.get("block_id", ""))) > 255:
            errors.append(f"must be less than 256 characters [json-pointer:{where}/block_id]")
        if kind == "section":
            text = (block.get("text") or {}).get("text", "")
            if len(text) > 3000:
                errors.append(f"must be less than 3001 characters [json-pointer:{where}/text/text]")
            if "text" not in block and "fields" not in block:
                errors.append(f"must provide text or fields [json-pointer:{where}]")
            for j, f in enumerate(block.get("fields") or []):
                if len(f.get("text", "")) > 2000:
                    errors.append(f"must be less than 2001 characters [json-pointer:{where}/fields/{j}/text]")
        elif kind == "header":
            if len((block.get("text") or {}).get("text", "")) > 150:
                errors.append(f"must be less than 151 characters [json-pointer:{where}/text/text]")
        elif kind == "context":
            if len(block.get("elements") or []) > 10:
                errors.append(f"no more than 10 items allowed [json-pointer:{where}/elements]")
            if not block.get("elements"):
                errors.append(f"must provide at least 1 item [json-pointer:{where}/elements]")
        elif kind == "actions":
            elements = block.get("elements") or []
            if len(elements) > 25:
                errors.append(f"no more than 25 items allowed [json-pointer:{where}/elements]")
            for j, el in enumerate(elements):
                if len((el.get("text") or {}).get("text", "")) > 75:
                    errors.append(f"must be less than 76 characters [json-pointer:{where}/elements/{j}/text/text]")
                if len(str(el.get("value", ""))) > 2000:
                    errors.append(f"must be less than 2001 characters [json-pointer:{where}/elements/{j}/value]")
        elif kind not in ("divider", "input", "image", "rich_text", "file", "video", "markdown"):
            errors.append(f"unknown block type {kind!r} [json-pointer:{where}/type]")
    return errors


class _Handler(BaseHTTPRequestHandler):
    fake: FakeSlack
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    # --- plumbing ------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _params(self, body: bytes) -> dict[str, Any]:
        ctype = self.headers.get("Content-Type", "")
        params: dict[str, Any] = {}
        query = urlparse(self.path).query
        if query:
            params.update({k: v[-1] for k, v in parse_qs(query).items()})
        if not body:
            return params
        if "json" in ctype:
            params.update(json.loads(body))
        elif "x-www-form-urlencoded" in ctype:
            params.update({k: v[-1] for k, v in parse_qs(body.decode("utf-8")).items()})
        for key in ("blocks", "view", "files", "attachments"):
            if isinstance(params.get(key), str):
                try:
                    params[key] = json.loads(params[key])
                except ValueError:
                    pass
        return params

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8" if raw is None else "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch(b"")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch(self._body())

    # --- routes --------------------------------------------------------------------------------
    def _dispatch(self, body: bytes) -> None:
        fake = self.fake
        path = urlparse(self.path).path
        headers = {k.lower(): v for k, v in self.headers.items()}
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()

        if path.startswith("/upload/"):
            fake._record(Call("upload", {"file_id": path.rsplit("/", 1)[1], "bytes": len(body), "content": body}, headers))
            return self._send(200, None, raw=b"OK - uploaded")
        if path.startswith("/response/"):
            payload = json.loads(body or b"{}")
            fake._record(Call("response_url", payload, headers))
            fake._hold("response_url")
            return self._send(200, None, raw=b"ok")
        if path.startswith("/files/"):
            file_id = path.split("/")[2]
            fake._record(Call("file_download", {"file_id": file_id, "token": token}, headers))
            file = fake.files.get(file_id)
            if file is None or not token.startswith("xoxb-"):
                return self._send(403, None, raw=b"<html>sign in</html>")
            return self._send(200, None, raw=file.content)
        if not path.startswith("/api/"):
            return self._send(404, {"ok": False, "error": "unknown_path"})

        method = path.removeprefix("/api/")
        params = self._params(body)
        params.pop("token", None)
        call = Call(method, params, headers)
        fake._record(call)
        fake._hold(method)

        if method in fake._rate_limit_once:
            retry_after = fake._rate_limit_once.pop(method)
            return self._send(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)})
        if method == "apps.connections.open":
            if not token.startswith("xapp-"):
                return self._send(200, {"ok": False, "error": "not_allowed_token_type"})
            return self._send(200, {"ok": True, "url": fake.socket_mode_url})
        if not token.startswith("xoxb-"):
            return self._send(200, {"ok": False, "error": "not_authed"})
        handler = getattr(self, "api_" + method.replace(".", "_"), None)
        if handler is None:
            return self._send(200, {"ok": False, "error": "unknown_method"})
        return handler(call)

    def _blocks_ok(self, call: Call, max_blocks: int = 50) -> bool:
        blocks = call.params.get("blocks")
        if blocks is None:
            return True
        errors = block_errors(blocks, max_blocks)
        if errors:
            call.params["_rejected"] = errors
            self._send(200, {"ok": False, "error": "invalid_blocks", "errors": errors})
            return False
        return True

    def _message_ok(self, call: Call) -> bool:
        channel = call.params.get("channel", "")
        if channel in self.fake.not_in_channels:
            self._send(200, {"ok": False, "error": "not_in_channel"})
            return False
        if not call.params.get("text") and not call.params.get("blocks"):
            self._send(200, {"ok": False, "error": "no_text"})
            return False
        if not self._blocks_ok(call):
            return False
        if len(call.params.get("text") or "") > 40_000:
            self.fake.truncated.append(call)
        return True

    def api_auth_test(self, call: Call) -> None:
        self._send(
            200,
            {"ok": True, "url": "https://test.slack.com/", "team": "Test", "user": "vllm-doctor", "team_id": TEAM_ID,
             "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": False},
            {"x-oauth-scopes": ",".join(sorted(self.fake.scopes))},
        )

    def api_usergroups_users_list(self, call: Call) -> None:
        if "usergroups:read" not in self.fake.scopes:
            return self._send(200, {"ok": False, "error": "missing_scope", "needed": "usergroups:read",
                                    "provided": ",".join(sorted(self.fake.scopes))})
        members = self.fake.groups.get(call.params.get("usergroup", ""))
        if members is None:
            return self._send(200, {"ok": False, "error": "no_such_subteam"})
        self._send(200, {"ok": True, "users": list(members)})

    def api_users_info(self, call: Call) -> None:
        if "users:read" not in self.fake.scopes:
            return self._send(200, {"ok": False, "error": "missing_scope", "needed": "users:read",
                                    "provided": ",".join(sorted(self.fake.scopes))})
        user_id = call.params.get("user", "")
        user: dict[str, Any] = {"id": user_id, "name": user_id.lower(), "is_bot": False}
        if str(call.params.get("include_locale", "")).lower() in ("true", "1"):
            user["locale"] = self.fake.locales.get(user_id, "en-US")
        self._send(200, {"ok": True, "user": user})

    def api_chat_postMessage(self, call: Call) -> None:
        if self._message_ok(call):
            ts = self.fake._next_ts()
            message = {"ts": ts, "text": call.params.get("text"), "user": BOT_USER_ID, "bot_id": BOT_ID}
            if call.params.get("thread_ts"):
                message["thread_ts"] = call.params["thread_ts"]
            call.params["_ts"] = ts
            self._send(200, {"ok": True, "channel": call.params.get("channel"), "ts": ts, "message": message})

    def api_chat_update(self, call: Call) -> None:
        if self._message_ok(call):
            self._send(200, {"ok": True, "channel": call.params.get("channel"), "ts": call.params.get("ts"), "text": call.params.get("text")})

    def api_chat_postEphemeral(self, call: Call) -> None:
        if self._message_ok(call):
            self._send(200, {"ok": True, "message_ts": self.fake._next_ts()})

    def api_chat_delete(self, call: Call) -> None:
        self._send(200, {"ok": True, "channel": call.params.get("channel"), "ts": call.params.get("ts")})

    def _view(self, call: Call) -> None:
        view = call.params.get("view") or {}
        limit = 100
        errors = block_errors(view.get("blocks") or [], limit)
        if errors:
            call.params["_rejected"] = errors
            return self._send(200, {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": errors}})
        self._send(200, {"ok": True, "view": {"id": "V0001", **view}})

    api_views_open = _view
    api_views_publish = _view
    api_views_update = _view

    def api_conversations_replies(self, call: Call) -> None:
        key = (call.params.get("channel", ""), call.params.get("ts", ""))
        self._send(200, {"ok": True, "messages": self.fake.thread_messages.get(key, []), "has_more": False})

    def api_files_info(self, call: Call) -> None:
        file = self.fake.files.get(call.params.get("file", ""))
        if file is None:
            return self._send(200, {"ok": False, "error": "file_not_found"})
        self._send(200, {"ok": True, "file": self.fake.file_object(file)})

    def api_files_getUploadURLExternal(self, call: Call) -> None:  # noqa: N802
        file_id = f"FUP{next(self.fake._ts)}"
        self._send(200, {"ok": True, "upload_url": f"http://127.0.0.1:{self.fake.port}/upload/{file_id}", "file_id": file_id})

    def api_files_completeUploadExternal(self, call: Call) -> None:  # noqa: N802
        files = call.params.get("files") or []
        self._send(200, {"ok": True, "files": [{"id": f.get("id"), "title": f.get("title")} for f in files]})
