"""`vllm-doctor diagnose HOST|GROUP [--inventory FILE] [--json] [--check ID …] [--tier N]` and
`vllm-doctor diagnose --local [--json]`. bot/cli/main.py calls configure_parser() and run().

Module-level imports stay light (no asyncssh, no rich) so building the CLI parser costs nothing.
Exit status: 0 no failures, 1 some check failed/errored/timed out or a host could not be checked,
2 bad arguments or configuration (raised as DoctorError and printed by bot/cli/main.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.present.i18n import LANGUAGES, Language, t

if TYPE_CHECKING:
    from rich.status import Status

    from bot.models import FleetReport
    from bot.runner.fleet_view import FleetView
    from bot.settings import Settings


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", help="inventory host or group name")
    parser.add_argument("--inventory", metavar="FILE", type=Path,
                        help="inventory YAML (own or Ansible format); default: VLLM_DOCTOR_INVENTORY")
    parser.add_argument("--local", action="store_true", help="check this machine instead of SSH hosts")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--lang", choices=["en", "zh"],
                        help="language of the report's headings (default: VLLM_DOCTOR_LANGUAGE, else English)")
    parser.add_argument("--check", action="append", metavar="ID", dest="checks",
                        help="run only this check id or area (repeatable), e.g. --check gpu --check server.metrics")
    parser.add_argument("--tier", type=int, choices=(0, 1, 2), default=0,
                        help="highest tier to run: 0 read-only (default), 1 root/slower, 2 intrusive")
    parser.add_argument("--raw", metavar="FILE", type=Path, help="write every command's (redacted) output here")
    parser.add_argument("--plot", metavar="FILE.png", type=Path,
                        help="draw each GPU's memory (used by others vs the share vLLM plans to take)")
    parser.add_argument("--grid", metavar="FILE.png", type=Path,
                        help="draw the hosts × check areas grid (coloured by the worst verdict)")
    parser.add_argument("--save-baseline", action="store_true",
                        help="store this run's facts as the group's known-good baseline; later runs report drift")
    parser.add_argument("--list", action="store_true", help="list the check catalogue and exit")
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    local = parser.add_argument_group("--local host fields (remote hosts take them from the inventory)")
    local.add_argument("--python", help="Python that runs vLLM (default: VLLM_DOCTOR_LOCAL_PYTHON or python3)")
    local.add_argument("--endpoint", help="vLLM server base URL to probe, e.g. http://127.0.0.1:8000")
    local.add_argument("--serve-port", type=int, help="port vLLM should serve on (default: from --endpoint or 8000)")
    local.add_argument("--expected-gpus", type=int, help="how many GPUs the machine should have (0: CPU-only)")
    local.add_argument("--gpu-memory-utilization", type=float,
                       help="share of each GPU's memory vLLM will take (default 0.9, vLLM's default)")
    local.add_argument("--model-dir", help="model directory to check")
    local.add_argument("--served-model", help="model name /v1/models should list")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from bot.errors import UserInputError
    from bot.models import HostRequest
    from bot.pipeline import Pipeline
    from bot.runner.inventory import HostSpec, host_from_spec

    if args.inventory is not None:
        settings = settings.model_copy(update={"runner_inventory": args.inventory})
    if args.list:
        return _list_checks(settings)
    if not args.local and not args.target:
        raise UserInputError("name a host or group from the inventory, or use --local")
    if args.local and args.target:
        raise UserInputError("give either a host/group or --local, not both")
    pipeline = Pipeline(settings)
    hosts = None
    if args.local:
        fields = {"python": args.python, "endpoint": args.endpoint, "serve_port": args.serve_port,
                  "expected_gpus": args.expected_gpus, "model_dir": args.model_dir,
                  "gpu_memory_utilization": args.gpu_memory_utilization,
                  "served_model": args.served_model}
        given = {k: v for k, v in fields.items() if v is not None}
        for name in ("python", "model_dir"):  # a path relative to where the command runs: make it absolute
            given[name] = _absolute(given[name]) if name in given else None
        given = {k: v for k, v in given.items() if v is not None}
        try:
            spec = HostSpec.model_validate(given)  # same validation as inventory fields
        except Exception as exc:
            raise UserInputError(_option_error(exc)) from None
        validated = host_from_spec("local", spec)  # derives serve_port from --endpoint
        hosts = [pipeline.local_host(python=spec.python, endpoint=validated.endpoint,
                                     serve_port=validated.serve_port, expected_gpus=validated.expected_gpus,
                                     model_dir=validated.model_dir, served_model=validated.served_model,
                                     gpu_memory_utilization=validated.gpu_memory_utilization)]

    show = _Progress(enabled=not args.no_progress and sys.stderr.isatty())
    with show, _sigterm_ends_the_run():
        request = HostRequest(args.target or "", tuple(args.checks or ()), args.tier)
        report = pipeline.diagnose(request, local=args.local, hosts=hosts, progress=show.update)
    if args.raw:
        args.raw.write_text(report.raw_text(), encoding="utf-8")
    from bot.runner.fleet_view import fleet_view

    view = fleet_view(report, settings, save_baseline=args.save_baseline,
                      saved_by=None if args.local else "cli")
    lang = _language(args, settings)
    if args.json:
        data = json.loads(report.to_json())
        data["fleet_diff"] = [d.sentence() for d in view.differences]  # added keys; the others unchanged
        data["drift"] = [d.sentence() for d in view.drift]
        data["hosts_differ"] = [g.sentence() for g in view.disagreements]
        data["language"] = lang
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        _print_fleet_view(view, lang)
        _print_text(report, lang)
    _draw(report, args, settings, view)
    return 0 if report.verdict in ("ok", "warn", "skipped") else 1


def _absolute(value: str) -> str:
    """`.vllm-venv/bin/python` or `~/models/x` as an absolute path (symlinks kept: a venv's python is
    one); a bare program name (`python3`) stays a name, looked up on PATH."""
    if "/" not in value and not value.startswith("~"):
        return value
    return os.path.abspath(os.path.expanduser(value))


def _option_error(exc: Exception) -> str:
    """A pydantic ValidationError about --local options as ONE line: `bad --python: …; bad --endpoint: …`."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"bad --local option: {str(exc).splitlines()[0]}"
    parts = []
    for err in errors():
        field = str(err.get("loc", ("?",))[0]).replace("_", "-")
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"bad --{field}: {message}")
    return "; ".join(parts) or "bad --local option"


def _language(args: argparse.Namespace, settings: Any) -> Language:
    """--lang, else a forced VLLM_DOCTOR_LANGUAGE; a host report has no asker's text to go by, so English."""
    for choice in (getattr(args, "lang", None), getattr(settings, "llm_language", None)):
        if isinstance(choice, str) and choice in LANGUAGES:
            return choice
    return "en"


def _print_fleet_view(view: FleetView, lang: Language = "en") -> None:
    # the sentences themselves come from bot/runner/fleet_view.py and stay English; the labels follow --lang
    for d in view.drift:  # drift first: it names what changed since the group last worked
        print(f"{t('host.drift', lang)}: {d.sentence()}")
    for diff in view.differences:
        print(f"{t('host.differs', lang)}: {diff.sentence()}")
    for g in view.disagreements:
        print(f"{t('host.differs', lang)}: {g.sentence()}")
    if view.baseline_saved:
        print(t("host.baseline_saved", lang))


def _draw(report: FleetReport, args: argparse.Namespace, settings: object, view: FleetView | None = None) -> None:
    from bot.errors import UserInputError

    if not (args.plot or args.grid):
        return
    from bot.present.memory_view import host_memory_bars
    from bot.present.pictures import memory_picture
    from bot.runner.fleet_view import grid_picture

    for path, make in ((args.plot, lambda: _memory(report, host_memory_bars, memory_picture)),
                       (args.grid, lambda: grid_picture(report, view))):
        if path is None:
            continue
        picture = make()
        if picture is None:
            print(f"note: nothing to draw for {path} (no GPU memory facts in this run)", file=sys.stderr)
            continue
        try:
            path.write_bytes(picture.png)
        except OSError as exc:
            raise UserInputError(f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"picture written to {path}", file=sys.stderr)


def _memory(report: FleetReport, bars_of: Any, draw: Any) -> Any:
    bars = bars_of(report)
    return draw(bars, f"GPU memory on {report.target}") if bars else None


@contextlib.contextmanager
def _sigterm_ends_the_run() -> Iterator[None]:
    """SIGTERM (kill, systemd stop, a CI timeout) unwinds the run like Ctrl-C: the running probes' process
    groups are killed and the audit row is closed as `interrupted`, instead of Python dying on the spot
    and leaving the row `running`. Exit status 143 (128 + SIGTERM), as if the signal had killed us."""

    def on_sigterm(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Progress:
    """One live status line on stderr while checks run (rich), or nothing when stderr is not a TTY."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._status: Status | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console

            self._status = Console(stderr=True).status("connecting…")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def update(self, message: str) -> None:
        if self._status is not None:
            self._status.update(message)


def _list_checks(settings: Settings) -> int:
    from bot.runner.catalogue import load_catalogue

    catalogue = load_catalogue(settings.runner_checks_dir)
    for check in catalogue.checks.values():
        cases = ", ".join(catalogue.referenced_cases()[check.id]) or "-"
        print(f"{check.id:24} tier {check.tier}  {check.title}  [{cases}]")
    return 0


def _print_text(report: FleetReport, lang: Language = "en") -> None:
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
        table.add_column(t("host.col.check", lang), no_wrap=True)
        table.add_column(t("host.col.finding", lang))  # the findings are the checks' own (English) messages
        table.add_column(t("host.col.cases", lang))
        for c in host.checks:
            table.add_row(VERDICT_ICON.get(c.verdict, c.verdict), c.id, escape(c.message), ", ".join(c.cases))
        console.print(table)
    counts: dict[str, int] = {}
    for host in report.hosts:
        for c in host.checks:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
    unreachable = sum(1 for h in report.hosts if h.error)
    sep = "，" if lang == "zh" else ", "
    summary = sep.join(t("host.count", lang, n=n, verdict=t(f"host.verdict.{v}", lang) if v in VERDICT_ICON else v)
                       for v, n in sorted(counts.items()))
    extra = t("host.not_checked", lang, n=unreachable) if unreachable else ""
    console.print(t("host.summary", lang, hosts=len(report.hosts), summary=summary, extra=extra,
                    secs=report.duration_s))
