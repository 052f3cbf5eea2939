"""Small pure pieces: retry memory, edit throttling, Slack text → log, file-host allow-list, decoding."""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import BinaryInput, UserInputError
from bot.slack.files import allowed_download, decode_text, fetch_file_text
from bot.slack.hosts import parse_args
from bot.slack.incoming import host_request, mentions_user, slack_to_plain, strip_bot_mention
from bot.slack.progress import ThrottledUpdater
from bot.slack.reply.kit import Message
from bot.slack.seen_events import SeenEvents


def test_seen_events_remember_ids_until_they_expire() -> None:
    seen = SeenEvents(ttl_s=10, capacity=3)
    assert seen.first_time("Ev1", now=0) and not seen.first_time("Ev1", now=5)
    assert seen.first_time("Ev1", now=11)  # expired: a very late retry is answered again
    for i in range(5):
        seen.first_time(f"E{i}", now=12)
    assert seen.first_time("E0", now=12)  # evicted by capacity


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Client:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    def chat_update(self, **kwargs: Any) -> None:
        self.updates.append(kwargs)


def test_throttled_updater_edits_at_most_once_per_interval_and_always_sends_the_final() -> None:
    clock, client = _Clock(), _Client()
    updater = ThrottledUpdater(client, "C1", "1.1", interval_s=1.0, clock=clock)
    built = 0

    def build() -> Message:
        nonlocal built
        built += 1
        return Message(text=f"v{built}")

    for step in range(30):  # 30 tokens over 3 seconds
        clock.now = step * 0.1
        updater.maybe_update(build)
    assert len(client.updates) == 2  # at 1.0 s and 2.0 s
    assert built == 2  # blocks are only built when an edit is due
    updater.final(Message(text="done"))
    assert client.updates[-1]["text"] == "done" and client.updates[-1]["ts"] == "1.1"


def test_slack_formatting_is_undone_for_the_engine() -> None:
    text = "x &lt; y &amp;&amp; <http://127.0.0.1:8000/v1|127.0.0.1:8000/v1> <!channel> <#C0123|ops>\n```\nlog\n```"
    assert slack_to_plain(text) == "x < y && 127.0.0.1:8000/v1 @channel #ops\n\n\nlog\n\n"


def test_bot_mentions_are_stripped_and_detected() -> None:
    assert strip_bot_mention("<@UBOT1> diagnose gpu-01", "UBOT1") == "diagnose gpu-01"
    assert mentions_user("hey <@UBOT1|doctor>", "UBOT1") and not mentions_user("hey <@UOTHER>", "UBOT1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("diagnose gpu-01", ("gpu-01", [])),
        ("Diagnose fleet gpu.memory tier", ("fleet", ["gpu.memory", "tier"])),
        ("diagnose gpu-01; rm -rf /", None),
        ("diagnose this log please\nTraceback (most recent call last):", None),
        ("why does it fail", None),
    ],
)
def test_host_requests_in_mentions(text: str, expected: Any) -> None:
    assert host_request(text) == expected


def test_host_command_arguments() -> None:
    assert parse_args([]) == (None, 0)
    assert parse_args(["gpu", "vllm.health"]) == (["gpu", "vllm.health"], 0)
    assert parse_args(["tier", "1"]) == (None, 1)
    for bad in (["tier"], ["tier", "9"], ["tier", "1", "x"]):
        with pytest.raises(Exception, match="tier"):
            parse_args(bad)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://files.slack.com/files-pri/T1-F1/download/x.log", True),
        ("https://slack.com/x", True),
        ("http://files.slack.com/x", False),  # never send the token in clear text
        ("https://files.slack.com.evil.example/x", False),
        ("https://evil.example/files.slack.com", False),
        ("http://127.0.0.1:4444/files/F1", True),  # the configured API host (a local emulator)
        ("http://127.0.0.1:5555/files/F1", False),
        ("file:///etc/passwd", False),
    ],
)
def test_the_bot_token_only_goes_to_slack_file_hosts(url: str, ok: bool) -> None:
    assert allowed_download(url, "http://127.0.0.1:4444/api/") is ok


def test_decoding_refuses_archives_and_binaries_but_keeps_text() -> None:
    assert decode_text("日志 ValueError".encode()) == "日志 ValueError"
    assert "\ufffd" in decode_text(b"mostly text \xff here " * 10)
    for data, word in ((b"\x1f\x8b\x08\x00", "gzip"), (b"PK\x03\x04", "zip"), (b"ELF\x00\x01", "binary")):
        with pytest.raises(BinaryInput, match=word):
            decode_text(data, "x.bin")


def test_refused_file_download_closes_the_error_response(fake_slack: Any) -> None:
    """Slack refusing a download (403) is an HTTPError holding the open response; chained into the user's
    error it would keep the socket open until the GC finds it (a ResourceWarning in some later test)."""
    file = {"id": "F0GONE01", "name": "gone.log", "size": 10, "url_private_download": fake_slack.base_url.replace(
        "/api/", "/files/F0GONE01/gone.log")}
    with pytest.raises(UserInputError, match="could not download") as info:
        fetch_file_text(None, file, token="xoxb-test", api_url=fake_slack.base_url, limit=1000)
    cause = info.value.__cause__
    assert getattr(cause, "code", None) == 403
    assert cause.fp.closed  # type: ignore[union-attr]
