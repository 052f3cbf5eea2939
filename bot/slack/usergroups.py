"""Which Slack user groups a user is in, for the runner's access rules (VLLM_DOCTOR_RUNNER_ACCESS).

Access rules name a handful of groups, so the bot asks `usergroups.users.list` for exactly those (one call
per group, cached for `ttl_s`) instead of listing every group of the workspace with its members.
Degrades to "in no group" rather than failing: without the `usergroups:read` scope Slack answers
`missing_scope` (logged once; rules by user and channel keep working), and a transient error costs only
that one request its group grants.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError

log = logging.getLogger(__name__)

# Answers that will not change by asking again soon: cached like a member list (as "no members").
_LASTING_ERRORS = {"missing_scope", "no_such_subteam", "subteam_not_found", "not_allowed_token_type"}


class UserGroupDirectory:
    def __init__(self, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._members: dict[str, tuple[float, frozenset[str]]] = {}  # group id → (expires, member ids)
        self._lock = threading.Lock()
        self._told_missing_scope = False

    def groups_of(self, client: Any, user_id: str | None, group_ids: Iterable[str]) -> set[str]:
        """The groups among `group_ids` that `user_id` belongs to."""
        if not user_id:
            return set()
        return {group for group in sorted(set(group_ids)) if user_id in self._members_of(client, group)}

    def _members_of(self, client: Any, group_id: str) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            cached = self._members.get(group_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            members = frozenset(client.usergroups_users_list(usergroup=group_id).get("users") or [])
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if error not in _LASTING_ERRORS:
                log.warning("could not read the members of user group %s (%s); treating it as empty for now",
                            group_id, error)
                return frozenset()
            self._explain(group_id, error)
            members = frozenset()
        except (SlackClientError, OSError) as exc:  # Slack unreachable: refuse by group this once, retry next time
            log.warning("could not read the members of user group %s (%s)", group_id, exc)
            return frozenset()
        with self._lock:
            self._members[group_id] = (now + self._ttl, members)
        return members

    def _explain(self, group_id: str, error: str) -> None:
        if error == "missing_scope":
            with self._lock:
                if self._told_missing_scope:
                    return
                self._told_missing_scope = True
            log.warning("the Slack app lacks the usergroups:read scope: access rules by user group "
                        "(VLLM_DOCTOR_RUNNER_ACCESS usergroups) match nobody until it is added and the app "
                        "reinstalled (slack-manifest.yaml)")
        else:
            log.warning("user group %s named in VLLM_DOCTOR_RUNNER_ACCESS: %s", group_id, error)


def rule_groups(rules: Iterable[Any], channel_id: str | None) -> set[str]:
    """User groups named by the access rules that can apply in `channel_id` (the only ones worth asking)."""
    out: set[str] = set()
    for rule in rules:
        if rule.channels and channel_id not in rule.channels:
            continue
        out.update(rule.usergroups)
    return out
