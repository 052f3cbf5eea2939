"""Helpers for the Slack host-diagnostics tests: an inventory of hosts that refuse connections (the
runner reports them per host; no sshd needed), and waiting for the final host report."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from fake_slack import FakeSlack


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: connections are refused


def unreachable_runner_settings(tmp_path: Path, access: list[Any]) -> dict[str, Any]:
    """Settings overrides: gpu-01 and gpu-02 (group `fleet`) on a closed port, the given access rules."""
    port = closed_port()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "hosts:\n"
        f"  gpu-01: {{address: 127.0.0.1, port: {port}, user: doctor}}\n"
        f"  gpu-02: {{address: 127.0.0.1, port: {port}, user: doctor}}\n"
        "groups:\n  fleet: [gpu-01, gpu-02]\n",
        encoding="utf-8",
    )
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("", encoding="utf-8")
    return {
        "runner_inventory": inventory,
        "runner_known_hosts": known_hosts,
        "runner_audit_db": tmp_path / "audit.sqlite3",
        "runner_connect_timeout_s": 3.0,
        "runner_access": access,
    }


def is_host_report(call: Any) -> bool:
    return call.method == "chat.update" and "host_verdict" in json.dumps(call.params.get("blocks"))


def final_report(fake: FakeSlack, count: int = 1, timeout: float = 60) -> Any:
    """The `count`-th host report posted (a chat.update carrying the host verdict blocks)."""
    calls = fake.wait_for(lambda cs: sum(map(is_host_report, cs)) >= count, timeout=timeout)
    return [c for c in calls if is_host_report(c)][count - 1]
