"""The Slack user's language, from `users.info` → `locale` (e.g. "zh-CN"), cached per user.

Rules (docs/language.md): a Chinese locale answers in Chinese. An English locale is Slack's default for
everyone who never changed it, so it does not override a question or paste written in Chinese; the text
decides then. Without the `users:read` scope or when Slack is unreachable the text decides too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError

from bot.present.i18n import Language, as_language

log = logging.getLogger(__name__)


class UserLocales:
    def __init__(self, ttl_s: float = 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, Language | None]] = {}
        self._lock = threading.Lock()

    def language_of(self, client: Any, user_id: str | None) -> Language | None:
        """'zh' or 'en' from the user's Slack locale; None when unknown."""
        if not user_id:
            return None
        now = self._clock()
        with self._lock:
            cached = self._cache.get(user_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            user = client.users_info(user=user_id, include_locale=True).get("user") or {}
            lang = as_language(str(user.get("locale") or ""))
        except SlackApiError as exc:
            log.warning("users.info for %s failed (%s); answering in the text's language", user_id,
                        exc.response.get("error"))
            lang = None
        except (SlackClientError, OSError) as exc:  # Slack unreachable: do not cache, ask again next time
            log.warning("users.info for %s failed (%s)", user_id, exc)
            return None
        with self._lock:
            self._cache[user_id] = (now + self._ttl, lang)
        return lang


def answer_language(locale: Language | None, text_language: str) -> Language:
    """A Chinese locale wins; otherwise the language of what the user wrote."""
    if locale == "zh":
        return "zh"
    return "zh" if text_language == "zh" else "en"


__all__ = ["UserLocales", "answer_language"]
