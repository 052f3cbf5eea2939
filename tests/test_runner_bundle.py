"""Issue 29 item 4: `diagnose --local` runs every check that needs the target Python in ONE process of it
(bot/runner/bundle.py), and the doctor's own CLI imports nothing heavy on the diagnose path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner_support import FIXTURES, host_python, local_host, run_diagnosis

from bot.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def test_python_probes_share_one_process_of_the_target_python(tmp_path, monkeypatch):
    log = tmp_path / "starts.log"
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {host_python()} \"$@\"\n")
    wrapper.chmod(0o755)
    # the stand-in CUDA torch and vLLM of the fake GPU hosts, on this machine
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "site"))
    monkeypatch.setenv("FAKEGPU_DIRS", str(FIXTURES / "profiles" / "healthy"))
    settings = Settings(runner_audit_db=tmp_path / "audit.sqlite3")
    host = local_host(settings, python=str(wrapper), expected_gpus=2)
    report = run_diagnosis("", settings=settings, local=True, hosts=[host], checks=["python"])
    [result] = report.hosts
    verdicts = {c.id: (c.verdict, c.message) for c in result.checks}
    assert verdicts["python.torch"] == ("ok", "torch 2.8.0+cu128, CUDA 12.8, 2 GPU(s): GPU0 NVIDIA H100 80GB HBM3 "
                                               "(compute 9.0), GPU1 NVIDIA H100 80GB HBM3 (compute 9.0)")
    assert verdicts["python.vllm_import"][0] == "ok", verdicts["python.vllm_import"]
    assert verdicts["python.runtime"][0] == "ok" and verdicts["python.vllm_install"][0] == "ok", verdicts
    # four probes, one interpreter start: vllm's import was forked from the process that holds torch
    assert log.read_text().splitlines() == ["-"]


def test_diagnose_cli_imports_no_heavy_library(tmp_path):
    code = ("import sys; from bot.cli.main import main; rc = main(['diagnose', '--local', '--json', '--no-progress', "
            "'--check', 'system.os', '--check', 'python.runtime']); heavy = ('torch', 'sentence_transformers', "
            "'faiss', 'matplotlib', 'rjieba', 'bm25s', 'asyncssh', 'openai', 'slack_bolt'); "
            "print('IMPORTED', sorted(m for m in heavy if m in sys.modules), rc)")
    env = {**os.environ, "HOME": str(tmp_path), "VLLM_DOCTOR_AUDIT_DB": str(tmp_path / "a.db"),
           "VLLM_DOCTOR_LOCAL_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines()[-1] in ("IMPORTED [] 0", "IMPORTED [] 1"), (out.stdout[-500:], out.stderr[-2000:])


def test_each_bundled_probe_keeps_its_own_limit_exit_status_and_output():
    from bot.runner import bundle
    from bot.runner.transport import CommandResult

    sections = [
        bundle.Section("0", "hang.py", "import time\nprint('started', flush=True)\ntime.sleep(30)\n", (), 0.5),
        bundle.Section("1", "crash.py", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", (), 10),
        bundle.Section("2", "exits.py", "import sys\nprint('partial'); sys.exit(3)\n", (), 10),
        bundle.Section("3", "args.py", "import sys\nprint(' '.join(sys.argv[1:]))\n", ("a b", "c"), 10),
        bundle.Section("4", "raises.py", "raise RuntimeError('boom')\n", (), 10),
    ]
    out = subprocess.run([sys.executable, "-"], input=bundle.program(sections), capture_output=True, text=True,
                         timeout=60)
    results = bundle.split(CommandResult(out.returncode, out.stdout, out.stderr, 0.0))
    assert (results["0"].rc, results["0"].stdout) == (124, "started\n")  # killed at its own limit
    assert results["1"].signal == 11  # a crash ends only that probe
    assert (results["2"].rc, results["2"].stdout) == (3, "partial\n")
    assert (results["3"].rc, results["3"].stdout) == (0, "a b c\n")
    assert results["4"].rc == 1 and "RuntimeError: boom" in results["4"].stderr
    assert out.returncode == 0 and set(results) == {"0", "1", "2", "3", "4"}


def test_a_bundle_that_dies_has_its_probes_run_one_by_one(tmp_path, monkeypatch):
    """torch itself crashing at import takes the bundle's process down (it imports torch once for all):
    every probe is then run on its own, so the ones that do not need torch still answer."""
    import shutil

    profile = tmp_path / "profile"
    shutil.copytree(FIXTURES / "profiles" / "healthy", profile)
    (profile / "torch.json").write_text('{"import_signal": "SIGILL", "version": "2.8.0+cu128"}')
    log = tmp_path / "starts.log"
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {host_python()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "site"))
    monkeypatch.setenv("FAKEGPU_DIRS", str(profile))
    settings = Settings(runner_audit_db=tmp_path / "audit.sqlite3")
    host = local_host(settings, python=str(wrapper), expected_gpus=2)
    [result] = run_diagnosis("", settings=settings, local=True, hosts=[host], checks=["python"]).hosts
    verdicts = {c.id: (c.verdict, c.message) for c in result.checks}
    assert verdicts["python.runtime"][0] == "ok" and verdicts["python.vllm_install"][0] == "ok", verdicts
    assert verdicts["python.torch"] == ("error", "the command crashed: SIGILL (Illegal instruction: this build "
                                                 "needs CPU features this host lacks (e.g. AVX-512))")
    assert len(log.read_text().splitlines()) == 5  # the bundle, then each of the four probes alone
