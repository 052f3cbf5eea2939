"""Everything the listeners need, built once at start-up and handed to `register(app, deps)`.

Tests build the same object with a local fake Slack and the real pipeline; nothing here talks to Slack.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.diagnosis.paste import Paste
from bot.models import Diagnosis
from bot.settings import Settings
from bot.slack.healthy_runs import HealthyRuns
from bot.slack.locale import UserLocales
from bot.slack.recent import RecentAnswers
from bot.slack.seen_events import SeenEvents
from bot.slack.thread_facts import ThreadFacts
from bot.slack.work import Workers


class PastePipeline(Protocol):
    """The explain-flow part of bot.pipeline.Pipeline the Slack listeners use."""

    kb: Any

    def match(
        self, data: str | bytes | Paste, *, host_versions: Mapping[str, str] | None = None, host_label: str = "",
        host_gpus: int | None = None,
    ) -> Diagnosis: ...

    def case(self, case_id: str) -> Any: ...

    def healthy_startup(self, data: str | bytes | Paste) -> Any: ...

    def facts_of(self, data: str | bytes | Paste) -> Any: ...

    def explain_stream(
        self, diagnosis: Diagnosis, host_facts: Any = None, language: str | None = None
    ) -> Iterator[Any]: ...


@dataclass
class SlackDeps:
    settings: Settings
    pipeline: PastePipeline
    bot_token: str
    workers: Workers = field(default_factory=Workers)
    seen_events: SeenEvents = field(default_factory=SeenEvents)
    recent: RecentAnswers = field(default_factory=RecentAnswers)  # SlackBot backs both with bot/slack/store.py
    thread_facts: ThreadFacts = field(default_factory=ThreadFacts)  # last host diagnosis per thread
    healthy_runs: HealthyRuns = field(default_factory=HealthyRuns)  # last working start-up per channel and model
    locales: UserLocales = field(default_factory=UserLocales)  # users.info locale per user, cached
    hosts: Any | None = None  # bot.slack.hosts.HostDiagnostics (the diagnose flow) when an inventory is configured
    kb_growth: Any | None = None  # bot.kb_growth.KBGrowth: feedback votes, candidates for new cases
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
