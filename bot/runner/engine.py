"""Run selected checks on hosts and judge the results.

Per host: connect (errors become a host-level result), find which required binaries exist with one
command, run every distinct command once (checks sharing a command share its output) concurrently,
then evaluate derived checks over the facts of the checks they need. Hosts run concurrently; a failing
host or check never stops the others.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.diagnosis.redact import redact
from bot.errors import RunnerError
from bot.ops import metrics
from bot.runner import bundle
from bot.runner.inventory import Host
from bot.runner.parsers import REGISTRY, Output, ParseError, Unavailable
from bot.runner.report import CheckResult, HostReport
from bot.runner.rules import FactView, evaluate, evaluate_rules
from bot.runner.transport import CommandResult, Connector, Session, describe_signal, sanitize
from kb.checks_schema import PLACEHOLDER_RE, Check, CheckCatalogue

KILL_GRACE_S = 5  # `timeout -k 5`: SIGKILL this long after SIGTERM
PREREQ_TIMEOUT_S = 10
# Prints the names (or paths) given as arguments that resolve to an executable on the host's PATH.
_PREREQ_SCRIPT = 'for b in "$@"; do command -v "$b" >/dev/null 2>&1 && printf "%s\\n" "$b"; done; exit 0\n'

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CommandSpec:
    argv: tuple[str, ...]
    stdin: str | None
    timeout_s: float
    binaries: tuple[str, ...]
    script: str | None = None  # file name under kb/checks/scripts, fed on stdin

    def wrapped(self) -> list[str]:
        """The argv run on the host: GNU timeout kills the command's whole process group at the deadline
        (a client-side timeout alone leaves it running on the host)."""
        return ["timeout", "-k", str(KILL_GRACE_S), f"{self.timeout_s:g}", *self.argv]

    def display(self) -> str:
        return shlex.join(self.wrapped()) + (f" < {self.script}" if self.script else "")


def command_for(check: Check, host: Host, catalogue: CheckCatalogue) -> CommandSpec:
    values = {k: str(v) for k, v in host.facts().items() if v is not None}

    def fill(text: str) -> str:
        return PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), ""), text)

    binaries = list(check.requires)
    if check.argv:
        argv = [fill(a) for a in check.argv]
        stdin = None
        if "{python}" in check.argv[0]:
            binaries.append(host.python)
    else:
        assert check.script is not None
        args = [fill(a) for a in check.script.args]
        stdin = catalogue.scripts[check.script.file]
        if check.script.interpreter == "python":
            argv = [host.python, "-", *args]
            binaries.append(host.python)
        else:
            argv = ["sh", "-s", "--", *args]
    script = check.script.file if check.script else None
    return CommandSpec(tuple(argv), stdin, check.timeout_s, tuple(dict.fromkeys(binaries)), script)


def _missing_host_fields(check: Check, host: Host) -> list[str]:
    facts = host.facts()
    return [name for name in check.requires_host if facts.get(name) is None]


def _result(check: Check, verdict: str, message: str, **kw: Any) -> CheckResult:
    return CheckResult(id=check.id, title=check.title, verdict=verdict, message=sanitize(message), tier=check.tier,
                       why=check.why, **kw)


def _clean(value: Any) -> Any:
    """Parsed facts with terminal control characters escaped: a JSON probe's "\\u001b" decodes to ESC."""
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clean(v) for v in value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def judge(check: Check, spec: CommandSpec, res: CommandResult, host: Host) -> tuple[CheckResult, dict[str, Any] | None]:
    """One command's result -> the check's verdict, plus its facts (None if there are none)."""
    common = {"duration_s": res.duration_s, "command": spec.display(), "rc": res.rc}
    stdout, stderr = redact(sanitize(res.stdout)), redact(sanitize(res.stderr))
    if res.error:
        return _result(check, "error", sanitize(res.error), stdout=stdout, stderr=stderr, **common), None
    on_host = res.timed_out_on_host(spec.timeout_s)
    if res.client_timeout or on_host:
        killed = "killed on the host" if on_host else "no exit status; the host may be overloaded"
        return _result(check, "timeout", f"no answer within {spec.timeout_s:g} s ({killed})",
                       stdout=stdout, stderr=stderr, **common), None
    if res.signal is not None:  # a crash, not an answer: what the output says is beside the point
        return _result(check, "error", f"the command crashed: {describe_signal(res.signal)}",
                       stdout=stdout, stderr=stderr, **common), None
    parser = REGISTRY[check.parser or ""]
    try:
        facts = _clean(parser(Output(stdout, stderr, res.rc or 0)))
    except Unavailable as exc:
        return _result(check, "skipped", str(exc), stdout=stdout, stderr=stderr, **common), None
    except ParseError as exc:
        return _result(check, "error", f"could not read the output: {exc}", stdout=stdout, stderr=stderr,
                       **common), None
    own = {**facts, "rc": res.rc, "stdout": stdout, "stderr": stderr}
    outcome = evaluate(check, FactView(own, {}, host.facts()))
    return _result(check, outcome.verdict, outcome.message, cases=list(outcome.cases), stdout=stdout,
                   stderr=stderr, facts=facts, **common), own


def judge_missing(check: Check, absent: list[str], host: Host) -> CheckResult:
    """A required binary is not on the host's PATH: `skipped`, unless the check's `if_missing` rules say
    what its absence means for this host (no nvidia-smi on a host that should have GPUs is a failure)."""
    names = ", ".join(absent)
    if not check.if_missing:
        return _result(check, "skipped", f"{names} not found on the host's PATH")
    outcome = evaluate_rules(check.id, check.if_missing, FactView({"missing": names}, {}, host.facts()))
    return _result(check, outcome.verdict, outcome.message, cases=list(outcome.cases))


def judge_derived(check: Check, results: dict[str, CheckResult], facts: dict[str, dict[str, Any]], host: Host) -> CheckResult:
    for needed in check.needs:
        if needed not in facts:
            r = results.get(needed)
            why = f"{r.verdict}: {r.message}" if r else "not run"
            return _result(check, "skipped", f"needs {needed} ({why})")
    outcome = evaluate(check, FactView({}, {n: facts[n] for n in check.needs}, host.facts()))
    return _result(check, outcome.verdict, outcome.message, cases=list(outcome.cases))


class ProbeTimeout(RunnerError):
    """The host gave no answer to the prerequisite probe in time: reported as `error_kind: timeout`."""


async def _available_binaries(session: Session, names: list[str]) -> set[str]:
    if not names:
        return set()
    limit = PREREQ_TIMEOUT_S
    argv = ["timeout", "-k", str(KILL_GRACE_S), f"{limit:g}", "sh", "-s", "--", *names]
    res = await session.run(argv, stdin=_PREREQ_SCRIPT, timeout_s=limit)
    shown = shlex.join(argv[:8]) + (" …" if len(argv) > 8 else "")
    if res.error:
        raise RunnerError(f"could not run the prerequisite probe `{shown}`: {redact(sanitize(res.error))[:200]}")
    if res.client_timeout or res.timed_out_on_host(limit):
        how = "killed on the host" if res.timed_out_on_host(limit) else "no exit status; the host may be overloaded"
        raise ProbeTimeout(f"timeout: the prerequisite probe `{shown}` gave no answer within {limit:g} s ({how})")
    if res.rc != 0:
        detail = (sanitize(res.stderr).strip().splitlines() or [f"exit status {res.rc}"])[-1]
        raise RunnerError(f"the host could not run the prerequisite probe (`sh` and GNU `timeout` are needed): "
                          f"{redact(detail)[:200]}")
    return {line.strip() for line in res.stdout.splitlines() if line.strip()}


async def diagnose_host(
    host: Host, connector: Connector, checks: list[Check], catalogue: CheckCatalogue, progress: Progress | None = None
) -> HostReport:
    start = time.monotonic()
    say = progress or (lambda _msg: None)
    report = HostReport(host=host.name, address=host.connect_to)
    try:
        session = await connector.open(host)
    except RunnerError as exc:
        report.error, report.error_kind = str(exc), type(exc).__name__
        report.duration_s = time.monotonic() - start
        say(f"{host.name}: {exc}")
        return report
    say(f"{host.name}: connected")
    results: dict[str, CheckResult] = {}
    facts: dict[str, dict[str, Any]] = {}
    try:
        plans: dict[CommandSpec, list[Check]] = {}
        for check in checks:
            if check.derived:
                continue
            missing = _missing_host_fields(check, host)
            if missing:
                results[check.id] = _result(check, "skipped", f"the inventory sets no {', '.join(missing)} for this host")
                continue
            plans.setdefault(command_for(check, host, catalogue), []).append(check)
        wanted = sorted({b for spec in plans for b in spec.binaries})
        try:
            available = await _available_binaries(session, wanted)
        except RunnerError as exc:
            kind = "timeout" if isinstance(exc, ProbeTimeout) else "RunnerError"
            report.error, report.error_kind = f"{host.name}: {exc}", kind
            report.duration_s = time.monotonic() - start
            return report
        done = len(results)  # skipped for missing inventory fields
        total = len(checks)

        # Every Python probe in one process of the target Python, started first (bot/runner/bundle.py).
        bundled = [spec for spec in plans if _bundleable(spec, host)
                   and not [b for b in spec.binaries if b not in available]]
        answers: asyncio.Future[dict[CommandSpec, CommandResult]] | None = None
        if len(bundled) >= 2:
            answers = asyncio.ensure_future(_run_bundle(session, bundled))

        async def run_plan(spec: CommandSpec, group: list[Check]) -> None:
            nonlocal done
            absent = [b for b in spec.binaries if b not in available]
            if absent:
                for check in group:
                    results[check.id] = judge_missing(check, absent, host)
            else:
                res = (await answers).get(spec) if answers is not None and spec in bundled else None
                if res is None:
                    res = await session.run(spec.wrapped(), stdin=spec.stdin, timeout_s=spec.timeout_s)
                for check in group:
                    results[check.id], own = judge(check, spec, res, host)
                    if own is not None:
                        facts[check.id] = own
            for check in group:
                done += 1
                say(f"{host.name}: {done}/{total} {check.id} {results[check.id].verdict}")

        await asyncio.gather(*(run_plan(spec, group) for spec, group in plans.items()))
        for check in _derived_in_order(checks):
            results[check.id] = judge_derived(check, results, facts, host)
            done += 1
            say(f"{host.name}: {done}/{total} {check.id} {results[check.id].verdict}")
    finally:
        await session.close()
    report.checks = [results[c.id] for c in checks]
    report.duration_s = time.monotonic() - start
    say(f"{host.name}: done in {report.duration_s:.1f} s")
    return report


def _bundleable(spec: CommandSpec, host: Host) -> bool:
    """A probe script run by the target Python (`python - ARGS < script.py`)."""
    return (spec.script is not None and spec.script.endswith(".py") and spec.stdin is not None
            and spec.argv[:2] == (host.python, "-"))


async def _run_bundle(session: Session, specs: list[CommandSpec]) -> dict[CommandSpec, CommandResult]:
    """Run the specs' probes in one process; a probe the bundle did not answer for is left out (it is
    then run on its own), unless the bundle ran out of time: then that probe timed out too."""
    sections = [bundle.Section(str(i), spec.script or "-", spec.stdin or "", spec.argv[2:], spec.timeout_s)
                for i, spec in enumerate(specs)]
    limit = bundle.timeout_for(sections)
    argv = ["timeout", "-k", str(KILL_GRACE_S), f"{limit:g}", specs[0].argv[0], "-"]
    res = await session.run(argv, stdin=bundle.program(sections), timeout_s=limit)
    answered = bundle.split(res)
    out: dict[CommandSpec, CommandResult] = {}
    for section, spec in zip(sections, specs, strict=True):
        if section.key in answered:
            out[spec] = answered[section.key]
        elif res.client_timeout or res.timed_out_on_host(limit):
            out[spec] = CommandResult(None, "", "", res.duration_s, client_timeout=True)
    return out


def _derived_in_order(checks: list[Check]) -> list[Check]:
    derived = {c.id: c for c in checks if c.derived}
    ordered: list[Check] = []
    placed: set[str] = set()

    def place(check: Check) -> None:
        if check.id in placed:
            return
        for needed in check.needs:
            if needed in derived:
                place(derived[needed])
        placed.add(check.id)
        ordered.append(check)

    for check in derived.values():
        place(check)
    return ordered


async def diagnose_hosts(
    hosts: list[Host],
    connector: Connector,
    checks: list[Check],
    catalogue: CheckCatalogue,
    *,
    progress: Progress | None = None,
    max_parallel_hosts: int = 32,
) -> list[HostReport]:
    gate = asyncio.Semaphore(max_parallel_hosts)
    total, done = len(hosts), 0

    def say(message: str) -> None:
        # A group run prefixes every line with hosts done/total: the CLI status line and the Slack
        # placeholder ("12/40 hosts done · gpu07: connected") show how far the run is.
        if progress is not None:
            progress(f"{done}/{total} hosts done · {message}" if total > 1 else message)

    async def one(host: Host) -> HostReport:
        nonlocal done
        async with gate:
            try:
                report = await diagnose_host(host, connector, checks, catalogue, say)
            except Exception as exc:  # a bug must not take the other hosts down; it is reported per host
                report = HostReport(host=host.name, address=host.connect_to, error=f"internal error: {exc!r}",
                                    error_kind="InternalError")
            done += 1
            say(f"{host.name}: {report.verdict}")
            return report

    try:
        reports = list(await asyncio.gather(*(one(h) for h in hosts)))
    finally:
        await connector.close()
    for report in reports:
        for check in report.checks:
            metrics.RUNNER_CHECKS.labels(verdict=check.verdict).inc()
            metrics.RUNNER_CHECK_SECONDS.observe(check.duration_s)
    return reports
