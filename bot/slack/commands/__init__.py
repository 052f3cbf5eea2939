"""Slash commands: acked at once (usage and input errors go back in the ack), work on deps.workers."""

from __future__ import annotations

from typing import Any

from bot.slack.commands.vllm_diagnose import vllm_diagnose
from bot.slack.commands.vllm_explain import vllm_explain
from bot.slack.deps import SlackDeps

COMMANDS = ("/vllm-explain", "/vllm-diagnose")  # slack-manifest.yaml declares the same (tested)


def register(app: Any, deps: SlackDeps) -> None:
    app.command(COMMANDS[0])(vllm_explain(deps))
    app.command(COMMANDS[1])(vllm_diagnose(deps))
