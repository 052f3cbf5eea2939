"""Host diagnostics from Slack: the bridge between chat and bot.runner (installed by another issue).

Until bot.runner exposes run_diagnosis / resolve_target / authorize, every entry point (slash command,
mention, button, modal) answers NOT_CONFIGURED instead of failing.
"""

from __future__ import annotations

from typing import Any

from bot.slack import blocks
from bot.slack.conversation import Where, tell_user

NOT_CONFIGURED = (
    "Host diagnostics are not configured on this bot yet. Once an admin sets up the host inventory and SSH "
    "access, this runs the read-only check catalogue on the host and posts the results here."
)


def load_host_diagnostics(settings: Any) -> Any | None:
    """The runner bridge when bot.runner is importable and configured, else None."""
    return None


def start_host_diagnosis(deps: Any, client: Any, where: Where, target: str, args: list[str]) -> None:
    if deps.hosts is None:
        tell_user(client, where, blocks.notice(NOT_CONFIGURED, ":desktop_computer:"))
        return
    deps.hosts.start(deps, client, where, target, args)
