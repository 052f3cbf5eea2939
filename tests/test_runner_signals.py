"""What the runner says when a command ends by a signal, on real processes (this machine, no sshd):
GNU timeout's SIGKILL after an ignored SIGTERM is a timeout, a crash is named with its meaning, and a CLI
run stopped by SIGTERM closes its audit row and kills what it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from runner_support import run_diagnosis

from bot.runner.audit import AuditLog
from bot.runner.transport import CommandResult
from bot.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def _catalogue(tmp_path: Path, argv: list[str], timeout_s: float) -> Path:
    checks = tmp_path / "checks"
    checks.mkdir(exist_ok=True)
    quoted = ", ".join(json.dumps(a) for a in argv)  # a JSON string is a YAML flow scalar
    (checks / "system.yaml").write_text(textwrap.dedent(f"""\
        area: system
        checks:
          - id: system.probe
            title: a probe that misbehaves
            tier: 0
            argv: [{quoted}]
            timeout_s: {timeout_s}
            parser: key_value
            rules: [{{verdict: ok, message: "answered"}}]
        """))
    return checks


def _settings(tmp_path: Path, checks: Path) -> Settings:
    return Settings(runner_audit_db=tmp_path / "audit.sqlite3", runner_checks_dir=checks,
                    runner_local_python=sys.executable)


def test_sigkill_after_an_ignored_sigterm_is_a_timeout(tmp_path):
    """`timeout -k 5 1` SIGKILLs its own process group when SIGTERM is ignored: the command ends by signal 9,
    not with 124/137, and must still read as a timeout killed on the host."""
    checks = _catalogue(tmp_path, ["sh", "-c", "trap '' TERM; sleep 30"], 1)
    report = run_diagnosis("", settings=_settings(tmp_path, checks), local=True)
    result = report.hosts[0].check("system.probe")
    assert (result.verdict, result.message) == ("timeout", "no answer within 1 s (killed on the host)")
    assert result.rc == -signal.SIGKILL


def test_a_crash_by_signal_is_reported_with_its_meaning(tmp_path):
    checks = _catalogue(tmp_path, ["sh", "-c", "echo half an answer; kill -ILL $$"], 10)
    result = run_diagnosis("", settings=_settings(tmp_path, checks), local=True).hosts[0].check("system.probe")
    assert result.verdict == "error"
    assert result.message == ("the command crashed: SIGILL (Illegal instruction: this build needs CPU features "
                              "this host lacks (e.g. AVX-512))")
    assert "half an answer" in result.stdout  # what it printed is kept for the raw file


def test_an_early_sigkill_is_a_crash_not_a_timeout():
    """SIGKILL before the deadline is the OOM killer or a person, not GNU timeout."""
    early = CommandResult(-9, "", "", duration_s=0.2)
    late = CommandResult(-9, "", "", duration_s=6.0)
    assert not early.timed_out_on_host(5) and early.signal == 9
    assert late.timed_out_on_host(5)
    assert CommandResult(124, "", "", 1.0).timed_out_on_host(5) and CommandResult(137, "", "", 1.0).timed_out_on_host(5)


def _wait_for(predicate, what: str, bound_s: float = 60) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_cli_run_killed_by_sigterm_closes_its_audit_row_and_its_probes(tmp_path):
    pid_file = tmp_path / "probe.pid"
    checks = _catalogue(tmp_path, ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 300"], 200)
    audit_db = tmp_path / "audit.sqlite3"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "VLLM_DOCTOR_AUDIT_DB": str(audit_db), "VLLM_DOCTOR_CHECKS_DIR": str(checks)}
    cli = subprocess.Popen([sys.executable, "-m", "bot.cli.main", "diagnose", "--local", "--json"], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "the probe to start")
        probe = int(pid_file.read_text())
        assert [r["status"] for r in AuditLog(audit_db).runs()] == ["running"]
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    [run] = AuditLog(audit_db).runs()
    assert run["status"] == "interrupted" and run["finished_at"] is not None
    _wait_for(lambda: _is_gone(probe), f"the probe (pid {probe}) to be killed", 10)


def _is_gone(pid: int) -> bool:
    """Exited (a zombie re-parented to an init that does not reap counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
