"""Helpers for the KB-growth tests: a real engine (real MiniLM, real FAISS/BM25 index) on a TEMPORARY copy
of kb/cases, so nothing is ever written into the repository's KB; a fake Slack that also answers the two
Web API methods only this feature uses; and the logs and cases the tests add."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from kb.loader import DEFAULT_CASES_DIR

TESTS = Path(__file__).resolve().parent.parent
for extra in (TESTS, TESTS / "slack"):  # shared helpers: tests/indexer_support.py, tests/slack/fake_slack.py
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from fake_slack import FakeSlack, _Handler  # noqa: E402

REVIEWER = "U0REVIEW1"
GROUP_REVIEWER = "U0GROUPR1"
REVIEWER_GROUP = "S0KBREVIEW"
AUTHOR = "U0AUTHOR1"
STRANGER = "U0STRANGE"

# A failure the bundled KB does not cover (log lines shaped like real vLLM output: engine prefix,
# traceback, errno message as Python prints it).
NOFILE_LOG = """\
INFO 05-02 10:00:01 [api_server.py:1043] vLLM API server version 0.8.5
INFO 05-02 10:00:09 [launcher.py:28] Available routes are:
ERROR 05-02 10:01:13 [core.py:396] EngineCore hit an exception: Traceback (most recent call last):
ERROR 05-02 10:01:13 [core.py:396]   File "/usr/local/lib/python3.12/dist-packages/zmq/sugar/socket.py", line 311, in bind
ERROR 05-02 10:01:13 [core.py:396]     super().bind(addr)
ERROR 05-02 10:01:13 [core.py:396] OSError: [Errno 24] Too many open files: '/tmp/vllm-ipc/4f1c2a9b-socket'
"""
NOFILE_LOG_2 = """\
(APIServer pid=81) ERROR 07-14 09:12:55 [serving_chat.py:210] Error in preprocessing prompt inputs
(APIServer pid=81) ERROR 07-14 09:12:55 [serving_chat.py:210] OSError: [Errno 24] Too many open files: '/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/a09a3/tokenizer.json'
"""

NOFILE_CASE_YAML = """\
id: too-many-open-files
title: The server runs out of file descriptors (too many open files)
title_zh: 文件描述符耗尽
area: serving
severity: high
signatures:
  - 'OSError: \\[Errno 24\\] Too many open files'
cause: >
  Every request, ZMQ socket and shared-memory segment holds a file descriptor. The soft limit of the
  container (often 1024) runs out under load, so opening the next socket fails and the engine stops.
fix:
  - text: Raise the open-files limit of the server process.
    command: ulimit -n 65535
examples:
  - source: https://github.com/example-org/vllm-notes/issues/1
    log: |
      ERROR 05-02 10:01:13 [core.py:396] OSError: [Errno 24] Too many open files: '/tmp/vllm-ipc/4f1c2a9b-socket'
  - source: https://github.com/example-org/vllm-notes/issues/2
    log: |
      (APIServer pid=81) ERROR 07-14 09:12:55 [serving_chat.py:210] OSError: [Errno 24] Too many open files: '/root/.cache/tokenizer.json'
references:
  - https://github.com/example-org/vllm-notes/issues/1
  - https://github.com/example-org/vllm-notes/issues/2
"""


def widget_case_data(n: int, case_id: str | None = None) -> dict[str, Any]:
    """A distinct, valid made-up case (its own signature word), for bulk and concurrency tests."""
    word = f"WidgetFault{n:03d}"
    return {
        "id": case_id or f"widget-fault-{n:03d}",
        "title": f"Widget controller {n} trips with {word}",
        "title_zh": "小部件控制器故障",
        "area": "hardware",
        "severity": "low",
        "signatures": [rf"{word}: controller \d+ tripped"],
        "cause": f"A made-up failure number {n} used only by the KB-growth tests: the widget controller trips.",
        "fix": [{"text": f"Reset widget controller {n}."}],
        "examples": [
            {"source": f"https://example.invalid/widget/{n}/a", "log": f"RuntimeError: {word}: controller 3 tripped\n"},
            {"source": f"https://example.invalid/widget/{n}/b", "log": f"ERROR 01-02 03:04:05 [w.py:1] {word}: controller 7 tripped\n"},
        ],
        "references": [f"https://example.invalid/widget/{n}/a", f"https://example.invalid/widget/{n}/b"],
    }


def copy_kb(dest: Path) -> Path:
    shutil.copytree(DEFAULT_CASES_DIR, dest)
    return dest


_ENCODERS: dict[str, Any] = {}  # one embedding model per path (onnx/torch) per test process


def make_engine(settings: Any) -> Any:
    """The real Pipeline on the settings' (temporary) KB and index, sharing the process's MiniLM model of the
    settings' embedding path: the copied session index was built by that path, so opening it re-embeds nothing
    (a model of the other path would make every test rebuild the index, ~20 s each)."""
    from bot.pipeline import Pipeline

    doctor = Pipeline.from_settings(settings)
    if settings.encoder not in _ENCODERS:
        _ENCODERS[settings.encoder] = doctor._make_encoder()
    doctor._encoder_instance = _ENCODERS[settings.encoder]
    _ = doctor.matcher
    return doctor


class _KBHandler(_Handler):
    """fake_slack's handler plus usergroups.users.list and chat.getPermalink."""

    def api_usergroups_users_list(self, call: Any) -> None:
        group = call.params.get("usergroup")
        members = self.fake.groups.get(group)  # type: ignore[attr-defined]
        if members is None:
            return self._send(200, {"ok": False, "error": "no_such_subteam"})
        self._send(200, {"ok": True, "users": list(members)})

    def api_chat_getPermalink(self, call: Any) -> None:  # noqa: N802
        channel, ts = call.params.get("channel", ""), str(call.params.get("message_ts", ""))
        self._send(200, {"ok": True, "channel": channel,
                         "permalink": f"https://test.slack.com/archives/{channel}/p{ts.replace('.', '')}"})


class KBFakeSlack(FakeSlack):
    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, list[str]] = {}
        self._server.RequestHandlerClass = type("Handler", (_KBHandler,), {"fake": self})
