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
