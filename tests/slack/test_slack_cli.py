"""`vllm-doctor serve`: light to import, clear errors for missing settings."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_importing_the_cli_hook_does_not_load_slack_bolt_or_torch() -> None:
    code = ("import sys, argparse; import bot.cli.serve as c; p = argparse.ArgumentParser(); c.configure_parser(p); "
            "a = p.parse_args(['--http', '--port', '3111']); assert a.http and a.port == 3111; "
            "print(sorted(m for m in ('slack_bolt', 'torch', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("http", "missing", "message"),
    [
        (True, {"slack_signing_secret": None}, "SLACK_SIGNING_SECRET"),
        (False, {"slack_app_token": None}, "SLACK_APP_TOKEN"),
        (False, {"slack_bot_token": None}, "SLACK_BOT_TOKEN"),
        (False, {"slack_app_token": "xoxb-not-an-app-token"}, "xapp-"),
    ],
)
def test_missing_or_wrong_tokens_are_a_clear_config_error(settings: Any, http: bool, missing: dict, message: str) -> None:
    from bot.errors import ConfigError
    from bot.slack.server import SlackBot

    values = {"slack_bot_token": "xoxb-x", "slack_app_token": "xapp-x", "slack_signing_secret": "s",
              "slack_api_url": "http://127.0.0.1:9/api/", **missing}
    with pytest.raises(ConfigError, match=message):
        SlackBot(settings.model_copy(update=values), pipeline=None, http=http)


def test_serve_parser_options() -> None:
    from bot.cli.serve import configure_parser

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args([])
    assert args.http is False and args.port is None
