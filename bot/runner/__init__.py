"""Remote runner: run the allow-listed check catalogue (kb/checks) on inventory hosts over SSH, or here.

Public API (synchronous; safe to call from worker threads and from inside a running event loop):

    run_diagnosis(target, settings=…, checks=None, max_tier=0, local=False, progress=None) -> FleetReport
    resolve_target(target, settings) -> list[Host]       # refuses anything but an inventory name
    authorize(user_id, channel_id, usergroup_ids, target, settings, max_tier=0) -> list[Host]
    parse_request("host01 gpu server.metrics tier 1") -> HostRequest(target, checks, max_tier)
    load_report("report.json") -> FleetReport        # `diagnose --json` output read back (explain)

Flow: access.py (target, who) -> inventory.py -> catalogue.py (select checks) -> engine.py over
ssh.py | local.py -> parsers/ + rules.py -> report.py; audit.py records every run.
Importing this package is cheap: asyncssh is loaded only when a remote run starts.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bot.errors import UserInputError
from bot.models import CheckResult, FleetReport, HostReport, HostRequest
from bot.runner.access import (
    authorize,
    inventory_from_settings,
    parse_request,
    resolve_target,
    validate_target,
)
from bot.runner.inventory import Host, Inventory, load_inventory
from bot.runner.report import load_report

__all__ = [
    "CheckResult",
    "FleetReport",
    "Host",
    "HostReport",
    "HostRequest",
    "Inventory",
    "authorize",
    "check_hosts",
    "load_inventory",
    "load_report",
    "local_host",
    "parse_request",
    "planned_checks",
    "resolve_target",
    "run_diagnosis",
    "validate_target",
]


def local_host(settings, **fields) -> Host:
    """This machine as a Host (`--local`); fields: python, endpoint, serve_port, expected_gpus, …"""
    values = {"python": settings.runner_local_python, **{k: v for k, v in fields.items() if v is not None}}
    return Host(name=socket.gethostname() or "localhost", address="localhost", **values)


def run_diagnosis(
    target: str,
    *,
    settings,
    checks: list[str] | None = None,
    max_tier: int = 0,
    local: bool = False,
    progress: Callable[[str], None] | None = None,
    inventory: Inventory | None = None,
    hosts: list[Host] | None = None,
    user_id: str | None = None,
    channel_id: str | None = None,
    source: str = "cli",
) -> FleetReport:
    """Run the catalogue on `target` (an inventory host or group) or, with local=True, on this machine.

    `checks` are check ids or areas (default: every check up to `max_tier`). Pass `hosts` when the caller
    already resolved and authorized them (Slack). Unreachable hosts, auth failures, host-key mismatches
    and hung checks are reported in the result; exceptions are raised only for bad arguments
    (UserInputError), configuration (ConfigError) and unknown targets (UnknownHost).
    Every run is written to the audit log with `user_id`/`channel_id` (CLI: the login name).
    """
    from bot.runner.audit import AuditLog
    from bot.runner.catalogue import load_catalogue, select_checks

    if max_tier not in (0, 1, 2):
        raise UserInputError("tier must be 0, 1 or 2")
    catalogue = load_catalogue(settings.runner_checks_dir)
    selected, problems = select_checks(catalogue, checks, max_tier)
    if problems:
        raise UserInputError("; ".join(problems))
    inv = inventory
    if local:
        hosts = hosts or [local_host(settings)]
        target = target or hosts[0].name
    else:
        if hosts is None:
            validate_target(target)  # refuse metacharacters before reading any file
        if inv is None and (hosts is None or settings.runner_inventory is not None):
            inv = inventory_from_settings(settings)
        if hosts is None:
            hosts = resolve_target(target, settings, inv)
    audit = AuditLog(settings.store_target(settings.runner_audit_db))
    run_id = audit.start(
        user_id=user_id or (f"cli:{_login()}" if source == "cli" else None), channel_id=channel_id,
        source=source, target=target, hosts=[h.name for h in hosts], checks=[c.id for c in selected],
        max_tier=max_tier,
    )  # fmt: skip
    started = time.time()
    try:
        reports = _run_sync(_diagnose(hosts, selected, catalogue, settings, local, progress, inv))
    except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM through the CLI's handler
        audit.finish(run_id, None, error=f"interrupted ({type(exc).__name__} {exc})".strip(), status="interrupted")
        raise
    except BaseException as exc:
        audit.finish(run_id, None, error=f"{type(exc).__name__}: {exc}")
        raise
    report = FleetReport(target=target, hosts=reports, max_tier=max_tier, checks_requested=checks,
                             started_at=started, duration_s=time.time() - started)
    audit.finish(run_id, report)
    return report


def check_hosts(hosts: list[Host], *, settings, checks: list[str] | None = None, max_tier: int = 0,
                progress: Callable[[str], None] | None = None) -> list[HostReport]:
    """Run the catalogue on already authorized hosts, without an audit row: one slice of a group run
    whose audit row the fleet queue's owner keeps (bot/runner/fleet.py)."""
    from bot.runner.catalogue import load_catalogue, select_checks

    catalogue = load_catalogue(settings.runner_checks_dir)
    selected, problems = select_checks(catalogue, checks, max_tier)
    if problems:
        raise UserInputError("; ".join(problems))
    inv = inventory_from_settings(settings) if settings.runner_inventory is not None else None
    return _run_sync(_diagnose(hosts, selected, catalogue, settings, False, progress, inv))


def planned_checks(settings, checks: list[str] | None, max_tier: int) -> list[str]:
    """The check ids a run of `checks` up to `max_tier` will execute (for the audit row)."""
    from bot.runner.catalogue import load_catalogue, select_checks

    selected, problems = select_checks(load_catalogue(settings.runner_checks_dir), checks, max_tier)
    if problems:
        raise UserInputError("; ".join(problems))
    return [c.id for c in selected]


async def _diagnose(hosts, selected, catalogue, settings, local, progress, inventory):
    from bot.runner.engine import diagnose_hosts

    if local:
        from bot.runner.local import LocalConnector

        connector = LocalConnector()
    else:
        from bot.runner.ssh import SSHConnector

        jump_hosts = dict(inventory.hosts) if inventory else {}
        connector = SSHConnector(
            known_hosts=settings.runner_known_hosts,
            ssh_config=settings.runner_ssh_config,
            connect_timeout_s=settings.runner_connect_timeout_s,
            max_connecting=settings.runner_max_connecting,
            max_channels_per_host=settings.runner_max_channels_per_host,
            jump_hosts=jump_hosts,
        )
    return await diagnose_hosts(hosts, connector, selected, catalogue, progress=progress,
                                max_parallel_hosts=settings.runner_max_parallel_hosts)


def _run_sync(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:  # called from inside an event loop: use a fresh one
        return pool.submit(asyncio.run, coro).result()


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"

