"""Twenty `vllm-doctor kb add` processes at once (real processes, real MiniLM, one shared KB directory,
index directory and SQLite file): every case is written, every one reports live, and the saved index
holds all of them, because each index write re-reads the KB under the index's directory lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import widget_case_data

from bot.kb_growth.caseyaml import render_case
from indexer.index import MANIFEST_NAME
from kb.loader import load_kb
from kb.schema import Case

# ~0.7 GB of memory per process (torch + MiniLM): a shared developer machine may set fewer
PROCESSES = int(os.environ.get("VLLM_DOCTOR_TEST_KB_ADD_PROCESSES", "20"))


@pytest.mark.slow
def test_parallel_kb_add_processes_never_lose_a_case_in_the_saved_index(grow_settings: Any, tmp_path: Path) -> None:
    files = []
    for n in range(PROCESSES):
        path = tmp_path / f"widget-{n:03d}.yaml"
        path.write_text(render_case(Case.model_validate(widget_case_data(n))), encoding="utf-8")
        files.append(path)
    env = dict(os.environ, VLLM_DOCTOR_KB_DIR=str(grow_settings.kb_dir), VLLM_DOCTOR_INDEX_DIR=str(grow_settings.index_dir),
               VLLM_DOCTOR_KB_DB=str(grow_settings.kb_db_path), VLLM_DOCTOR_KB_GIT_COMMIT="false")
    env.pop("VLLM_DOCTOR_KB_WRITE_DIR", None)
    procs = [subprocess.Popen([sys.executable, "-m", "bot", "kb", "add", "--from-file", str(f), "--json", "--force"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for f in files]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=1500)
        assert proc.returncode == 0, err.decode()[-2000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert all(r["live"] for r in results)
    added = {r["id"] for r in results}
    assert added == {f"widget-fault-{n:03d}" for n in range(PROCESSES)}
    on_disk = load_kb(grow_settings.kb_dir)  # strict: every file valid
    manifest = json.loads((Path(grow_settings.index_dir) / MANIFEST_NAME).read_text())
    missing = added - set(manifest["case_hashes"])
    assert missing == set(), f"the saved index lost {sorted(missing)}"
    assert manifest["case_hashes"] == on_disk.case_hashes
    assert {d["case"] for d in manifest["documents"]} == set(on_disk.by_id())
