"""The App Home tab: usage, KB size, the viewer's own recent diagnoses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.present.i18n import Language
from bot.slack.deps import SlackDeps
from bot.slack.reply import home as home_blocks
from bot.slack.reply import kb_growth as kbb


def app_home_opened(deps: SlackDeps) -> Callable[..., None]:
    def on_app_home_opened(event: dict[str, Any], client: Any) -> None:
        if event.get("tab", "home") != "home":
            return
        user = event["user"]
        lang = deps.locales.language_of(client, user) or "en"
        client.views_publish(user_id=user, view=home_for(deps, user, lang))

    return on_app_home_opened


def home_for(deps: SlackDeps, user: str, lang: Language = "en") -> dict[str, Any]:
    view = home_blocks.home_view(
        user_id=user,
        kb_size=deps.kb_size(),
        recent=deps.recent.for_user(user),
        llm_enabled=deps.llm_enabled,
        runner_enabled=deps.runner_enabled,
        max_bytes=deps.max_bytes,
        watch_channels=sorted(deps.watch_channels),
        lang=lang,
    )
    # Logs that got "unknown" or "Didn't help": candidates for new KB cases (Home tabs allow 100 blocks).
    extra = kbb.home_section_for(getattr(deps, "kb_growth", None), lang=lang, user=user)
    view["blocks"] = (view["blocks"] + extra)[:100]
    return view
