"""The diagnose flow (hosts) as one small service that bot/pipeline.py composes:

    HostRequest → access (validate, authorize) → inventory → catalogue → runner engine over SSH or
    locally → FleetReport

`HostFlow` holds nothing but the settings (inventory, access rules, SSH options, audit log): the runner
modules it calls are imported when a host is checked, never for a paste. `Pipeline.diagnose` and its
siblings hand their calls to it; the CLI and Slack keep calling the pipeline.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from bot.errors import UserInputError
from bot.models import FleetReport, HostReport, HostRequest
from bot.settings import Settings

if TYPE_CHECKING:
    from bot.runner.inventory import Host, Inventory
    from bot.runner.transport import Connector
    from kb.checks_schema import Check, CheckCatalogue

Progress = Callable[[str], None]  # one short line per step ("gpu01: 12/34 checks"), best effort
_T = TypeVar("_T")


@dataclass(frozen=True)
class Requester:
    """Who asked for a host diagnosis, for the audit log (CLI: the login name)."""

    source: Literal["cli", "slack"] = "cli"
    user_id: str | None = None
    channel_id: str | None = None


class HostFlow:
    """Host checks under one Settings value (Pipeline.with_settings makes another for other settings)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def runner_configured(self) -> bool:
        """Remote host checks need an inventory (VLLM_DOCTOR_INVENTORY); --local does not."""
        return self.settings.runner_inventory is not None

    def inventory(self) -> Inventory:
        """The configured inventory, re-read when its file changes (ConfigError when none is set)."""
        from bot.runner.access import inventory_from_settings

        return inventory_from_settings(self.settings)

    def catalogue(self) -> CheckCatalogue:
        from bot.runner.catalogue import load_catalogue

        return load_catalogue(self.settings.runner_checks_dir)  # cached per directory

    def _select(self, request: HostRequest) -> tuple[CheckCatalogue, list[Check]]:
        from bot.runner.catalogue import select_checks

        if request.max_tier not in (0, 1, 2):
            raise UserInputError("tier must be 0, 1 or 2")
        catalogue = self.catalogue()
        selected, problems = select_checks(catalogue, list(request.checks) or None, request.max_tier)
        if problems:
            raise UserInputError("; ".join(problems))
        return catalogue, selected

    def planned_checks(self, request: HostRequest) -> list[str]:
        """The check ids a run of `request` will execute (for the audit row of a queued group run)."""
        return [c.id for c in self._select(request)[1]]

    def resolve_hosts(self, target: str) -> list[Host]:
        """An inventory host or group name → its hosts (InvalidTarget, UnknownHost otherwise)."""
        from bot.runner.access import resolve_target

        return resolve_target(target, self.settings)

    def authorize(
        self, user_id: str, channel_id: str | None, usergroup_ids: set[str], request: HostRequest
    ) -> list[Host]:
        """The hosts `user_id` may check from `channel_id` (default deny; PermissionDenied otherwise)."""
        from bot.runner.access import authorize

        return authorize(user_id, channel_id, usergroup_ids, request.target, self.settings, max_tier=request.max_tier)

    def local_host(self, **fields: Any) -> Host:
        """This machine as a Host (`--local`); fields: python, endpoint, serve_port, expected_gpus, …"""
        from bot.runner.inventory import Host

        values = {"python": self.settings.runner_local_python, **{k: v for k, v in fields.items() if v is not None}}
        return Host(name=socket.gethostname() or "localhost", address="localhost", **values)

    def connector(self, *, local: bool, inventory: Inventory | None) -> Connector:
        """How checks reach a host: this machine's shell, or SSH with verified host keys."""
        if local:
            from bot.runner.local import LocalConnector

            return LocalConnector()
        from bot.runner.ssh import SSHConnector

        s = self.settings
        return SSHConnector(
            known_hosts=s.runner_known_hosts,
            ssh_config=s.runner_ssh_config,
            connect_timeout_s=s.runner_connect_timeout_s,
            max_connecting=s.runner_max_connecting,
            max_channels_per_host=s.runner_max_channels_per_host,
            jump_hosts=dict(inventory.hosts) if inventory else {},
        )

    def diagnose(
        self,
        request: HostRequest,
        *,
        local: bool = False,
        hosts: list[Host] | None = None,
        progress: Progress | None = None,
        requester: Requester | None = None,
    ) -> FleetReport:
        """Run the catalogue on `request.target` (an inventory host or group) or, with local=True, here.

        `request.checks` are check ids or areas (default: every check up to `request.max_tier`). Pass
        `hosts` when the caller already resolved and authorized them (Slack). Unreachable hosts, auth
        failures, host-key mismatches and hung checks are reported in the result; exceptions are raised
        only for bad arguments (UserInputError), configuration (ConfigError) and unknown targets
        (UnknownHost). Every run is written to the audit log with who asked. Synchronous: safe from
        worker threads and from inside a running event loop.
        """
        from bot.runner.access import inventory_from_settings, resolve_target, validate_target
        from bot.runner.audit import AuditLog

        if not isinstance(request, HostRequest):  # a paste goes to match(); say so instead of failing later
            raise TypeError(f"Pipeline.diagnose takes a HostRequest (hosts), not {type(request).__name__}; "
                            "a paste is matched with Pipeline.match")
        requester = requester or Requester()
        catalogue, selected = self._select(request)
        target = request.target
        inventory: Inventory | None = None
        if local:
            hosts = hosts or [self.local_host()]
            target = target or hosts[0].name
        else:
            if hosts is None:
                validate_target(target)  # refuse metacharacters before reading any file
            if hosts is None or self.settings.runner_inventory is not None:
                inventory = inventory_from_settings(self.settings)
            if hosts is None:
                hosts = resolve_target(target, self.settings, inventory)
        audit = AuditLog(self.settings.store_target(self.settings.runner_audit_db))
        user_id = requester.user_id or (f"cli:{_login()}" if requester.source == "cli" else None)
        run_id = audit.start(
            user_id=user_id, channel_id=requester.channel_id, source=requester.source, target=target,
            hosts=[h.name for h in hosts], checks=[c.id for c in selected], max_tier=request.max_tier,
        )  # fmt: skip
        started = time.time()
        try:
            reports = _run_sync(self._check_hosts(hosts, selected, catalogue, local, progress, inventory))
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM through the CLI's handler
            audit.finish(run_id, None, error=f"interrupted ({type(exc).__name__} {exc})".strip(), status="interrupted")
            raise
        except BaseException as exc:
            audit.finish(run_id, None, error=f"{type(exc).__name__}: {exc}")
            raise
        report = FleetReport(target=target, hosts=reports, max_tier=request.max_tier,
                             checks_requested=list(request.checks) or None, started_at=started,
                             duration_s=time.time() - started)
        audit.finish(run_id, report)
        return report

    def check_hosts(
        self, hosts: list[Host], request: HostRequest, progress: Progress | None = None
    ) -> list[HostReport]:
        """Run the catalogue on already authorized hosts, without an audit row: one slice of a group run
        whose audit row the fleet queue's owner keeps (bot/runner/fleet.py)."""
        catalogue, selected = self._select(request)
        inventory = self.inventory() if self.runner_configured else None
        return _run_sync(self._check_hosts(hosts, selected, catalogue, False, progress, inventory))

    async def _check_hosts(
        self,
        hosts: list[Host],
        selected: list[Check],
        catalogue: CheckCatalogue,
        local: bool,
        progress: Progress | None,
        inventory: Inventory | None,
    ) -> list[HostReport]:
        from bot.runner.engine import diagnose_hosts

        connector = self.connector(local=local, inventory=inventory)
        return await diagnose_hosts(hosts, connector, selected, catalogue, progress=progress,
                                    max_parallel_hosts=self.settings.runner_max_parallel_hosts)


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
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


__all__ = ["HostFlow", "Progress", "Requester"]
