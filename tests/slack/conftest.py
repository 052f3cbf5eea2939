"""Fixtures for the Slack bot tests: a fake Slack Web API over real HTTP, the bot served by its real HTTP
server (waitress) on a free port, signed requests sent with urllib. The engine is the real one
(tests/conftest.py `doctor`: bundled KB + all-MiniLM-L6-v2), built once per session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shared harness modules (vllm_support, vllm_server) live in tests/; make them importable whether or
# not tests/ is a package and whichever subset of the suite runs.
_TESTS_DIR = str(Path(__file__).resolve().parent.parent)
if _TESTS_DIR not in sys.path:
    sys.path.append(_TESTS_DIR)

from fake_slack import FakeSlack  # noqa: E402
from slack_support import SlackSender, bot_settings, kb_store  # noqa: E402


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture
def make_http_bot(fake_slack: FakeSlack, doctor: Any, settings: Any, tmp_path: Any) -> Iterator[Any]:
    """Start the bot in HTTP mode against the fake; returns (bot, sender). Stopped after the test."""
    from bot.slack.server import SlackBot

    started: list[Any] = []

    def make(engine: Any = None, **overrides: Any) -> tuple[Any, SlackSender]:
        overrides.setdefault("kb_db_path", tmp_path / "kb-growth.sqlite3")
        overrides.setdefault("slack_state_db", tmp_path / "slack-state.sqlite3")  # bots of one test share it
        bot_cfg = bot_settings(fake_slack, settings, **overrides)
        engine = engine or doctor
        bot = SlackBot(bot_cfg, engine, http=True, kb_growth=kb_store(bot_cfg, engine)).start()
        started.append(bot)
        return bot, SlackSender(bot.url + "/slack/events")

    yield make
    for bot in started:
        bot.stop(drain_s=30)


@pytest.fixture
def http_bot(make_http_bot: Any) -> tuple[Any, SlackSender]:
    return make_http_bot()
