"""Remote runner: run the allow-listed check catalogue (kb/checks) on inventory hosts over SSH, or here.

The orchestration of a run (audit row, connector, catalogue selection) is bot.pipeline.Pipeline.diagnose;
this package holds the stages it composes. Public API:

    resolve_target(target, settings) -> list[Host]       # refuses anything but an inventory name
    authorize(user_id, channel_id, usergroup_ids, target, settings, max_tier=0) -> list[Host]
    parse_request("host01 gpu server.metrics tier 1") -> HostRequest(target, checks, max_tier)
    load_report("report.json") -> FleetReport        # `diagnose --json` output read back (explain)

Flow: access.py (target, who) -> inventory.py -> catalogue.py (select checks) -> engine.py over
ssh.py | local.py -> parsers/ + rules.py -> report.py; audit.py records every run.
Importing this package is cheap: asyncssh is loaded only when a remote run starts.
"""

from __future__ import annotations

from bot.models import CheckResult, FleetReport, HostReport, HostRequest
from bot.runner.access import (
    authorize,
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
    "load_inventory",
    "load_report",
    "parse_request",
    "resolve_target",
    "validate_target",
]
