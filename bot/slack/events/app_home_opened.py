"""The App Home tab: usage, KB size, the viewer's own recent diagnoses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.slack.deps import SlackDeps
from bot.slack.reply import home
from bot.slack.reply import kb_growth as kb_growth_blocks


def app_home_opened(deps: SlackDeps) -> Callable[..., None]:
    def on_app_home_opened(event: dict[str, Any], client: Any) -> None:
        if event.get("tab", "home") != "home":
            return
        user = event["user"]
        client.views_publish(user_id=user, view=home_for(deps, user))

    return on_app_home_opened


def home_for(deps: SlackDeps, user: str) -> dict[str, Any]:
    view = home.home_view(
        user_id=user,
        kb_size=deps.kb_size(),
        recent=deps.recent.for_user(user),
        llm_enabled=deps.llm_enabled,
        runner_enabled=deps.runner_enabled,
        max_bytes=deps.max_bytes,
        watch_channels=sorted(deps.watch_channels),
    )
    # Logs that got "unknown" or "Didn't help": candidates for new KB cases (Home tabs allow 100 blocks).
    extra = kb_growth_blocks.home_section_for(getattr(deps, "kb_growth", None))
    view["blocks"] = (view["blocks"] + extra)[:100]
    return view
