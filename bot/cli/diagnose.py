"""`vllm-doctor diagnose HOST|GROUP [--inventory FILE] [--json] [--check ID …] [--tier N]` and
`vllm-doctor diagnose --local [--json]`. bot/cli/main.py calls configure_parser() and run().

Module-level imports stay light (no asyncssh, no rich) so building the CLI parser costs nothing.
Exit status: 0 no failures, 1 some check failed/errored/timed out or a host could not be checked,
2 bad arguments or configuration (raised as DoctorError and printed by bot/cli/main.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

    from rich.status import Status

    from bot.models import FleetReport
    from bot.pipeline import Pipeline
    from bot.settings import Settings


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", help="inventory host or group name")
    parser.add_argument("--inventory", metavar="FILE", type=Path,
                        help="inventory YAML (own or Ansible format); default: VLLM_DOCTOR_INVENTORY")
    parser.add_argument("--local", action="store_true", help="check this machine instead of SSH hosts")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--check", action="append", metavar="ID", dest="checks",
                        help="run only this check id or area (repeatable), e.g. --check gpu --check server.metrics")
    parser.add_argument("--tier", type=int, choices=(0, 1, 2), default=0,
                        help="highest tier to run: 0 read-only (default), 1 root/slower, 2 intrusive")
    parser.add_argument("--raw", metavar="FILE", type=Path, help="write every command's (redacted) output here")
    parser.add_argument("--list", action="store_true", help="list the check catalogue and exit")
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    local = parser.add_argument_group("--local host fields (remote hosts take them from the inventory)")
    local.add_argument("--python", help="Python that runs vLLM (default: VLLM_DOCTOR_LOCAL_PYTHON or python3)")
    local.add_argument("--endpoint", help="vLLM server base URL to probe, e.g. http://127.0.0.1:8000")
    local.add_argument("--serve-port", type=int, help="port vLLM should serve on (default: from --endpoint or 8000)")
    local.add_argument("--expected-gpus", type=int, help="how many GPUs the machine should have")
    local.add_argument("--model-dir", help="model directory to check")
    local.add_argument("--served-model", help="model name /v1/models should list")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from bot.errors import UserInputError
    from bot.models import HostRequest
    from bot.pipeline import Pipeline
    from bot.runner.inventory import HostSpec, host_from_spec

    if args.inventory is not None:
        settings = settings.model_copy(update={"runner_inventory": args.inventory})
    pipeline = Pipeline(settings)
    if args.list:
        return _list_checks(pipeline)
    if not args.local and not args.target:
        raise UserInputError("name a host or group from the inventory, or use --local")
    if args.local and args.target:
        raise UserInputError("give either a host/group or --local, not both")
    hosts = None
    if args.local:
        fields = {"python": args.python, "endpoint": args.endpoint, "serve_port": args.serve_port,
                  "expected_gpus": args.expected_gpus, "model_dir": args.model_dir,
                  "served_model": args.served_model}
        given = {k: v for k, v in fields.items() if v is not None}
        try:
            spec = HostSpec.model_validate(given)  # same validation as inventory fields
        except Exception as exc:
            raise UserInputError(f"bad --local option: {exc}") from exc
        validated = host_from_spec("local", spec)  # derives serve_port from --endpoint
        hosts = [pipeline.local_host(python=spec.python, endpoint=validated.endpoint,
                                     serve_port=validated.serve_port, expected_gpus=validated.expected_gpus,
                                     model_dir=validated.model_dir, served_model=validated.served_model)]

    request = HostRequest(args.target or "", tuple(args.checks or ()), args.tier)
    show = _Progress(enabled=not args.no_progress and sys.stderr.isatty())
    with show:
        report = pipeline.diagnose(request, local=args.local, hosts=hosts, progress=show.update)
    if args.raw:
        args.raw.write_text(report.raw_text(), encoding="utf-8")
    if args.json:
        print(report.to_json())
    else:
        _print_text(report)
    return 0 if report.verdict in ("ok", "warn", "skipped") else 1


class _Progress:
    """One live status line on stderr while checks run (rich), or nothing when stderr is not a TTY."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._status: Status | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console

            self._status = Console(stderr=True).status("connecting…")
            self._status.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.__exit__(exc_type, exc, tb)

    def update(self, message: str) -> None:
        if self._status is not None:
            self._status.update(message)


def _list_checks(pipeline: Pipeline) -> int:
    catalogue = pipeline.catalogue()
    for check in catalogue.checks.values():
        cases = ", ".join(catalogue.referenced_cases()[check.id]) or "-"
        print(f"{check.id:24} tier {check.tier}  {check.title}  [{cases}]")
    return 0


def _print_text(report: FleetReport) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from bot.runner.report import VERDICT_ICON

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for host in report.hosts:
        if host.error:
            console.print(f"[bold]{escape(host.host)}[/bold]  {VERDICT_ICON['error']} {escape(host.error)}")
            continue
        table = Table(title=f"{host.host} ({host.duration_s:.1f} s)", title_justify="left", show_lines=False)
        table.add_column("", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("finding")
        table.add_column("KB cases")
        for c in host.checks:
            table.add_row(VERDICT_ICON.get(c.verdict, c.verdict), c.id, escape(c.message), ", ".join(c.cases))
        console.print(table)
    counts: dict[str, int] = {}
    for host in report.hosts:
        for c in host.checks:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
    unreachable = sum(1 for h in report.hosts if h.error)
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    extra = f", {unreachable} host(s) not checked" if unreachable else ""
    console.print(f"{len(report.hosts)} host(s), {summary}{extra} in {report.duration_s:.1f} s")
