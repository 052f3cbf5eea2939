"""Everything the listeners need, built once at start-up and handed to `register(app, deps)`.

Tests build the same object with a local fake Slack and the real pipeline; nothing here talks to Slack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bot.settings import Settings
from bot.slack.incoming import Where
from bot.slack.recent import RecentAnswers
from bot.slack.seen_events import SeenEvents
from bot.slack.thread_facts import ThreadFacts
from bot.slack.work import Workers

if TYPE_CHECKING:
    from bot.kb_growth import KBGrowth
    from bot.pipeline import Pipeline


class HostChecks(Protocol):
    """What listeners use of bot.slack.hosts.HostDiagnostics (a protocol: that module imports this one)."""

    def picker_hint(self) -> str: ...

    def check_target(self, target: str) -> str | None: ...

    def start(self, deps: SlackDeps, client: Any, where: Where, target: str, args: list[str]) -> None: ...


@dataclass
class SlackDeps:
    settings: Settings
    pipeline: Pipeline  # the composition root: listeners call only its entry points
    bot_token: str
    workers: Workers = field(default_factory=Workers)
    seen_events: SeenEvents = field(default_factory=SeenEvents)
    recent: RecentAnswers = field(default_factory=RecentAnswers)  # SlackBot backs both with bot/slack/store.py
    thread_facts: ThreadFacts = field(default_factory=ThreadFacts)  # last host diagnosis per thread
    hosts: HostChecks | None = None  # bot.slack.hosts.HostDiagnostics when bot.runner is installed and configured
    kb_growth: KBGrowth | None = None  # bot.kb_growth.KBGrowth: feedback votes, candidates for new cases
    bot_user_id: str | None = None  # filled from auth.test when the App starts

    @property
    def max_bytes(self) -> int:
        return self.settings.slack_max_input_bytes

    @property
    def watch_channels(self) -> frozenset[str]:
        return frozenset(self.settings.slack_watch_channels)

    @property
    def llm_enabled(self) -> bool:
        return bool(self.settings.vllm_base_url)

    @property
    def runner_enabled(self) -> bool:
        return self.hosts is not None

    def kb_size(self) -> int:
        try:
            return len(self.pipeline.kb.cases)
        except (AttributeError, TypeError):
            return 0
