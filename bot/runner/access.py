"""Who may diagnose what, and what a target may look like.

A target typed in chat is only ever looked up as a name in the inventory; it never becomes part of a
command. Anything that is not a plain name (shell metacharacters, spaces, paths, ranges) is refused
before the inventory is even read. Authorization is default-deny: a Slack user may diagnose a host only
if a `runner_access` rule grants it (bot/settings.py RunnerAccessRule).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from bot.errors import ConfigError, InvalidTarget, PermissionDenied
from bot.models import HostRequest
from bot.runner.inventory import NAME_RE, Host, Inventory, load_inventory

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


def inventory_from_settings(settings) -> Inventory:
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


def resolve_target(target: str, settings, inventory: Inventory | None = None) -> list[Host]:
    """Target (host or group name) -> hosts. InvalidTarget for a malformed name, UnknownHost for a name
    the inventory does not know."""
    name = validate_target(target)
    return (inventory or inventory_from_settings(settings)).resolve(name)


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


def authorize(
    user_id: str,
    channel_id: str | None,
    usergroup_ids: list[str] | tuple[str, ...] | set[str] | None,
    target: str,
    settings,
    *,
    max_tier: int = 0,
    inventory: Inventory | None = None,
) -> list[Host]:
    """The hosts `user_id` may diagnose for `target` in `channel_id` at `max_tier`, or PermissionDenied.

    Every refusal is written to the audit log. Target validation errors (InvalidTarget, UnknownHost)
    are raised as they are and audited too.
    """
    from bot.runner.audit import AuditLog

    audit = AuditLog(settings.runner_audit_db)
    try:
        hosts = resolve_target(target, settings, inventory)
    except Exception as exc:  # InvalidTarget, UnknownHost, ConfigError: refused and audited alike
        audit.record_refusal(user_id, channel_id, target, str(exc))
        raise
    inv = inventory or inventory_from_settings(settings)
    groups = set(usergroup_ids or ())
    applying = []
    for rule in settings.runner_access:
        user_ok = (not rule.users and not rule.usergroups) or "*" in rule.users or user_id in rule.users \
            or bool(groups & set(rule.usergroups))
        channel_ok = not rule.channels or (channel_id is not None and channel_id in rule.channels)
        if user_ok and channel_ok:
            applying.append(rule)
    if not applying:
        reason = ("you may not run host checks here: no access rule covers you in this channel "
                  "(an admin can grant it in VLLM_DOCTOR_RUNNER_ACCESS)")
        audit.record_refusal(user_id, channel_id, target, reason)
        raise PermissionDenied(reason)
    allowed: set[str] = set()
    allowed_any_tier: set[str] = set()
    for rule in applying:
        granted = _granted_hosts(rule.hosts, inv)
        allowed_any_tier |= granted
        if rule.max_tier >= max_tier:
            allowed |= granted
    refused = [h.name for h in hosts if h.name not in allowed]
    if refused:
        if all(name in allowed_any_tier for name in refused):
            reason = f"tier {max_tier} checks are not granted to you for {', '.join(refused[:10])}"
        else:
            more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
            reason = f"you may not diagnose {', '.join(refused[:10])}{more} from this channel"
        audit.record_refusal(user_id, channel_id, target, reason)
        raise PermissionDenied(reason)
    return hosts
