"""Who may diagnose what, and what a target may look like.

A target typed in chat is only ever looked up as a name in the inventory; it never becomes part of a
command. Anything that is not a plain name (shell metacharacters, spaces, paths, ranges) is refused
before the inventory is even read. Authorization is default-deny: a Slack user may diagnose a host only
if a `runner_access` rule grants it (bot/settings.py RunnerAccessRule).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bot.errors import ConfigError, DoctorError, InvalidTarget, PermissionDenied, UnknownHost
from bot.models import HostRequest
from bot.runner.inventory import NAME_RE, Host, Inventory, load_inventory

if TYPE_CHECKING:
    from bot.settings import RunnerAccessRule, Settings

_SHELL_META = set(";|&$`\\\"'<>(){}[]*?!~#=%^,\n\r\t ")
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, Inventory]] = {}


def validate_target(target: str) -> str:
    """The target as a plain inventory name, or InvalidTarget with a message fit for chat."""
    name = (target or "").strip()
    if not name:
        raise InvalidTarget("name a host or group from the inventory, e.g. `/vllm-diagnose gpu01`")
    if any(ch in _SHELL_META for ch in name) or not NAME_RE.match(name):
        shown = name[:40] + ("…" if len(name) > 40 else "")
        raise InvalidTarget(
            f"{shown!r} is not a host or group name. Names are letters, digits, '.', '_' and '-'; "
            "what you type is only looked up in the inventory, never run."
        )
    return name


_CHECK_NAME_RE = re.compile(r"^[a-z]+(?:\.[a-z0-9_]+)?$")


def parse_request(text: str) -> HostRequest:
    """Chat text `host01 [check|area …] [tier N]` -> a validated request (InvalidTarget otherwise).

    Only names come out of this: the target as an inventory name, checks as catalogue names. Unknown
    check names are refused later by the catalogue with the list of what exists.
    """
    words = (text or "").split()
    if not words:
        raise InvalidTarget("usage: `/vllm-diagnose HOST|GROUP [check or area …] [tier 0|1|2]`")
    target = validate_target(words[0])
    checks: list[str] = []
    tier = 0
    rest = words[1:]
    i = 0
    while i < len(rest):
        word = rest[i].lower()
        if word in ("tier", "--tier") and i + 1 < len(rest) and rest[i + 1] in ("0", "1", "2"):
            tier = int(rest[i + 1])
            i += 2
            continue
        if word.startswith("tier=") and word[5:] in ("0", "1", "2"):
            tier = int(word[5:])
        elif _CHECK_NAME_RE.match(word):
            checks.append(word)
        else:
            shown = rest[i][:40]
            raise InvalidTarget(f"{shown!r} is not a check, an area or `tier N`; usage: "
                                "`/vllm-diagnose HOST|GROUP [check or area …] [tier 0|1|2]`")
        i += 1
    return HostRequest(target, tuple(checks), tier)


def inventory_from_settings(settings: Settings) -> Inventory:
    """The configured inventory, re-read when the file changes."""
    path = settings.runner_inventory
    if path is None:
        raise ConfigError("no host inventory configured: set VLLM_DOCTOR_INVENTORY (or pass --inventory)")
    path = Path(path).expanduser()
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise ConfigError(f"inventory {path}: {exc.strerror}") from exc
    with _cache_lock:
        cached = _cache.get(str(path))
        if cached and cached[0] == mtime:
            return cached[1]
    inventory = load_inventory(path)
    with _cache_lock:
        _cache[str(path)] = (mtime, inventory)
    return inventory


def resolve_target(target: str, settings: Settings, inventory: Inventory | None = None) -> list[Host]:
    """Target (host or group name) -> hosts. InvalidTarget for a malformed name, UnknownHost for a name
    the inventory does not know."""
    name = validate_target(target)
    return (inventory or inventory_from_settings(settings)).resolve(name)


def validate_access_rules(rules: list[RunnerAccessRule], inventory: Inventory) -> None:
    """ConfigError naming each access rule whose `hosts` lists a name the inventory does not have: a
    misspelt or removed group would otherwise grant nothing, silently."""
    problems = []
    for i, rule in enumerate(rules):
        unknown = [n for n in rule.hosts if n != "*" and n not in inventory.hosts and n not in inventory.groups]
        if unknown:
            problems.append(f"rule {i + 1} ({', '.join(repr(n) for n in unknown)})")
    if problems:
        raise ConfigError(
            "VLLM_DOCTOR_RUNNER_ACCESS names hosts or groups that are not in the inventory "
            f"{inventory.source or ''}: {'; '.join(problems)}. Fix the rule or the inventory."
        )


def access_inventory(settings: Settings, inventory: Inventory | None = None) -> Inventory:
    """The inventory, checked against the access rules (ConfigError for a rule naming an unknown name)."""
    inv = inventory or inventory_from_settings(settings)
    validate_access_rules(settings.runner_access, inv)
    return inv


def _granted_hosts(rule_hosts: list[str], inventory: Inventory) -> set[str]:
    out: set[str] = set()
    for name in rule_hosts:
        if name == "*":
            return set(inventory.hosts)
        if name in inventory.hosts:
            out.add(name)
        elif name in inventory.groups:
            out.update(inventory.groups[name])
    return out


def _applying_rules(
    user_id: str, channel_id: str | None, usergroup_ids: Iterable[str] | None, settings: Settings
) -> list[RunnerAccessRule]:
    groups = set(usergroup_ids or ())
    applying = []
    for rule in settings.runner_access:
        user_ok = (not rule.users and not rule.usergroups) or "*" in rule.users or user_id in rule.users \
            or bool(groups & set(rule.usergroups))
        channel_ok = not rule.channels or (channel_id is not None and channel_id in rule.channels)
        if user_ok and channel_ok:
            applying.append(rule)
    return applying


NO_RULE = ("you may not run host checks here: no access rule covers you in this channel "
           "(an admin can grant it in VLLM_DOCTOR_RUNNER_ACCESS)")


def _not_yours(name: str) -> str:
    # The same words for a name that does not exist and one the asker may not diagnose: a refusal must
    # not tell an unauthorised user which host names the inventory has.
    return (f"you may not diagnose '{name}' from here: it is not a host or group you have access to "
            "(an admin can grant it in VLLM_DOCTOR_RUNNER_ACCESS)")


@dataclass(frozen=True)
class _Decision:
    hosts: list[Host] | None
    message: str = ""  # what the asker is told
    reason: str = ""  # what the audit log records (may name hosts the asker may not see)
    error: type[Exception] = PermissionDenied


def _decide(user_id: str, channel_id: str | None, usergroup_ids: Iterable[str] | None, target: str,
            settings: Settings, max_tier: int,
            inventory: Inventory | None) -> _Decision:
    name = validate_target(target)
    applying = _applying_rules(user_id, channel_id, usergroup_ids, settings)
    if not applying:
        return _Decision(None, NO_RULE, NO_RULE)
    inv = access_inventory(settings, inventory)
    sees_all = any("*" in rule.hosts for rule in applying)
    try:
        hosts = inv.resolve(name)
    except UnknownHost as exc:
        if sees_all:  # may see every name anyway: say plainly that this one does not exist
            return _Decision(None, str(exc), str(exc), UnknownHost)
        return _Decision(None, _not_yours(name), str(exc))
    allowed: set[str] = set()
    allowed_any_tier: set[str] = set()
    for rule in applying:
        granted = _granted_hosts(rule.hosts, inv)
        allowed_any_tier |= granted
        if rule.max_tier >= max_tier:
            allowed |= granted
    refused = [h.name for h in hosts if h.name not in allowed]
    if not refused:
        return _Decision(hosts)
    if any(n not in allowed_any_tier for n in refused):
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        return _Decision(None, _not_yours(name), f"not granted: {', '.join(refused[:10])}{more}")
    reason = f"tier {max_tier} checks are not granted to you for {', '.join(refused[:10])}"
    return _Decision(None, reason, reason)


def authorize(
    user_id: str,
    channel_id: str | None,
    usergroup_ids: list[str] | tuple[str, ...] | set[str] | None,
    target: str,
    settings: Settings,
    *,
    max_tier: int = 0,
    inventory: Inventory | None = None,
) -> list[Host]:
    """The hosts `user_id` may diagnose for `target` in `channel_id` at `max_tier`, or PermissionDenied.

    Every refusal is written to the audit log with its real reason. The asker is told the same thing for
    a name that does not exist and a name they may not diagnose (UnknownHost only for users granted every
    host); InvalidTarget (not a name) and ConfigError are raised as they are and audited too.
    """
    from bot.runner.audit import AuditLog

    audit = AuditLog(settings.store_target(settings.runner_audit_db))
    try:
        decision = _decide(user_id, channel_id, usergroup_ids, target, settings, max_tier, inventory)
    except Exception as exc:  # InvalidTarget, ConfigError: refused and audited alike
        audit.record_refusal(user_id, channel_id, target, str(exc))
        raise
    if decision.hosts is None:
        audit.record_refusal(user_id, channel_id, target, decision.reason)
        raise decision.error(decision.message)
    return decision.hosts


def access_problem(user_id: str, channel_id: str | None, usergroup_ids: Iterable[str] | None, target: str,
                   settings: Settings,
                   *, max_tier: int = 0) -> str | None:
    """What authorize() would tell this user about `target`, without running or auditing anything (the
    host picker shows it on the field); None when the target is fine."""
    try:
        decision = _decide(user_id, channel_id, usergroup_ids, target, settings, max_tier, None)
    except DoctorError as exc:
        return str(exc)
    return None if decision.hosts is not None else decision.message


def visible_names(
    user_id: str, channel_id: str | None, usergroup_ids: Iterable[str] | None, settings: Settings
) -> list[str]:
    """Host and group names this user may diagnose here (at some tier), for hints: an unauthorised user
    sees none, a user granted gpu01 sees gpu01 and no other name of the inventory."""
    applying = _applying_rules(user_id, channel_id, usergroup_ids, settings)
    if not applying:
        return []
    inv = access_inventory(settings)
    granted: set[str] = set()
    for rule in applying:
        granted |= _granted_hosts(rule.hosts, inv)
    groups = sorted(g for g, members in inv.groups.items() if members and set(members) <= granted)
    return sorted(h for h in inv.hosts if h in granted) + groups
