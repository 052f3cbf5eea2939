"""The query path without torch (indexer/onnx_encoder.py): the same MiniLM exported to ONNX and run by
onnxruntime gives the same vectors as sentence-transformers, a cold `explain` never imports torch, a damaged
ONNX file is exported again (or the torch path answers) with one warning, and an index built by the other
path is rebuilt, not searched with mismatched vectors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from indexer_support import CountingEncoder, index_warnings, make_kb, real_encoder, write_new_case

from indexer.documents import case_documents
from indexer.index import KBIndex
from indexer.lexical import LexicalIndex
from indexer.onnx_encoder import BACKEND_SUFFIX, OnnxEncoder
from kb.loader import load_kb

REPO = Path(__file__).resolve().parent.parent
MIN_COSINE = 0.999  # the two runtimes differ in float summation order only; measured ≥ 0.99999
HEAVY_ML = ("torch", "sentence_transformers", "transformers")


def shared_onnx() -> OnnxEncoder:
    """The encoder on the session's shared export (tests/conftest.py sets VLLM_DOCTOR_ONNX_DIR)."""
    return OnnxEncoder(onnx_dir=os.environ["VLLM_DOCTOR_ONNX_DIR"])


def sample_texts(doctor) -> list[str]:
    """KB documents (what the index embeds) and log queries (what a paste asks), both languages."""
    docs = [d.dense_text for case in doctor.kb.cases[::9] for d in case_documents(case)]
    logs = [json.loads(line)["log"] for line in (REPO / "tests/eval/dev.jsonl").read_text().splitlines()[::60]]
    questions = [json.loads(line)["question"] for line in (REPO / "tests/eval/questions.jsonl").read_text().splitlines()[:8]]
    return [*docs, *logs, *questions, "", "x", "CUDA out of memory " * 200]


def test_onnx_vectors_agree_with_sentence_transformers(doctor) -> None:
    texts = sample_texts(doctor)
    assert len(texts) > 60
    onnx = shared_onnx()
    ours = onnx.encode(texts)
    theirs = real_encoder().encode(texts)
    assert onnx.backend == "onnx"
    assert ours.shape == theirs.shape == (len(texts), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * theirs, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"cosine {cosines.min():.5f} on {texts[worst][:80]!r}"
    # one text alone gives the same vector as inside a padded batch
    alone = onnx.encode([texts[worst]])[0]
    assert float(alone @ ours[worst]) >= 0.99999


def test_the_two_paths_have_different_model_ids() -> None:
    onnx, torch_path = shared_onnx(), real_encoder()
    assert onnx.model_id == torch_path.model_id + BACKEND_SUFFIX
    assert onnx.dim == torch_path.dim == 384


def _run_cold(args: list[str], settings, stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """A fresh `vllm-doctor …` process on the session's index; returns it and the heavy modules it imported."""
    probe = (
        "import sys\n"
        "from bot.cli.main import main\n"
        f"rc = main({args!r})\n"
        f"print('MODULES', sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY_ML!r}), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "VLLM_DOCTOR_INDEX_DIR": str(settings.index_dir),
           "VLLM_DOCTOR_KB_DB_PATH": str(settings.kb_db_path), "VLLM_DOCTOR_ENCODER": "onnx"}
    env.pop("VLLM_BASE_URL", None)
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, input=stdin, text=True,
                          capture_output=True, timeout=600)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES "))
    return proc, set(eval(line.removeprefix("MODULES ")))  # noqa: S307 - our own printed list literal


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["explain", "--no-llm", "--json", "-"], "FAILED\nValueError: No available memory for the cache blocks. "
         "Try increasing `gpu_memory_utilization` when initializing the engine.\n"),
        (["explain", "--no-llm", "-"], "两台机器跑分布式推理，启动以后就一直不动了\n"),
        (["kb", "search", "NCCL watchdog timeout"], None),
    ],
    ids=["log", "question", "kb-search"],
)
def test_cold_commands_never_import_torch(doctor, settings, args, stdin) -> None:
    proc, heavy = _run_cold(args, settings, stdin)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert heavy == set(), f"a cold {args[0]} imported {sorted(heavy)}"
    assert "Traceback" not in proc.stderr
    if args[0] == "explain" and "--json" in args:
        assert json.loads(proc.stdout)["matches"][0]["case_id"] == "kv-cache-no-memory"
    else:
        assert proc.stdout.strip()


def test_a_damaged_onnx_file_is_exported_again_with_one_warning(tmp_path, caplog) -> None:
    first = OnnxEncoder(onnx_dir=tmp_path)
    assert first.ensure_ready() == "onnx" and first.exported
    reference = first.encode(["NCCL watchdog timeout on rank 3"])
    data = bytearray(first.data_path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # same size, some weights zeroed (rows the probes do not use)
    first.data_path.write_bytes(bytes(data))

    caplog.set_level(logging.WARNING)
    again = OnnxEncoder(onnx_dir=tmp_path)
    vector = again.encode(["NCCL watchdog timeout on rank 3"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "exporting it again" in warnings[0], warnings
    assert again.exported and again.backend == "onnx"
    assert float(vector[0] @ reference[0]) >= 0.99999
    caplog.clear()
    assert OnnxEncoder(onnx_dir=tmp_path).ensure_ready() == "onnx"  # repaired: no warning, no export
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_truncated_or_altered_copy_is_refused_before_use(tmp_path) -> None:
    shared = shared_onnx()
    shared.ensure_ready()
    for name in (shared.onnx_path.name, shared.data_path.name, shared.sidecar_path.name):
        (tmp_path / name).write_bytes((shared.onnx_path.parent / name).read_bytes())
    copy = OnnxEncoder(onnx_dir=tmp_path)
    tokenizer = copy._tokenizer_or_load()
    assert copy._open_checked(tokenizer) == ""  # a copy (new mtime, same bytes) passes on its checksum
    data = copy.data_path.read_bytes()
    copy.data_path.write_bytes(data[:1000])
    assert "truncated" in copy._open_checked(tokenizer)
    copy.data_path.write_bytes(data[:-4] + b"\0\0\0\0")
    assert "checksum" in copy._open_checked(tokenizer)


def test_when_no_export_is_possible_the_torch_path_answers_with_one_warning(tmp_path, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    caplog.set_level(logging.WARNING)
    encoder = OnnxEncoder(onnx_dir=blocker / "models")  # cannot be created, whoever runs the test
    vector = encoder.encode(["CUDA out of memory"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert encoder.backend == "torch"
    assert len(warnings) == 1 and "using the torch path" in warnings[0], warnings
    assert float(vector[0] @ real_encoder().encode(["CUDA out of memory"])[0]) >= 0.99999
    encoder.encode(["again"])
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_an_index_built_by_the_torch_path_is_rebuilt_and_upserts_use_onnx(tmp_path, caplog) -> None:
    kb = make_kb(tmp_path / "cases")
    index_dir = tmp_path / "index"
    torch_counter = CountingEncoder(real_encoder())
    KBIndex.open(kb, index_dir, lambda: torch_counter)
    n_docs = torch_counter.texts_encoded
    assert n_docs > 0

    caplog.set_level(logging.WARNING)
    caplog.clear()
    onnx_counter = CountingEncoder(shared_onnx())
    index = KBIndex.open(kb, index_dir, lambda: onnx_counter)
    warnings = index_warnings(caplog.records)
    assert onnx_counter.texts_encoded == n_docs, "vectors of the other path were reused"
    assert len(warnings) == 1 and "was built with model" in warnings[0] and BACKEND_SUFFIX in warnings[0]
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["model_id"].endswith(BACKEND_SUFFIX)

    # kb add: the new case is embedded by the ONNX path, and its vectors are torch's within tolerance
    write_new_case(tmp_path / "cases")
    new_case = next(c for c in load_kb(tmp_path / "cases").cases if c.id == "test-widget-overheat")
    stats = index.upsert_case(new_case)
    assert stats.encoded == len(case_documents(new_case)) and onnx_counter.calls[-1] == stats.encoded
    rows = [i for i, d in enumerate(index.documents) if d.case_id == new_case.id]
    stored = index._state_or_raise().store.reconstruct(rows)
    expected = real_encoder().encode([index.documents[i].dense_text for i in rows])
    assert np.sum(stored * expected, axis=1).min() >= MIN_COSINE
    assert index.search("FluxCapacitorThermalTrip widget", k=3)[0].case_id == new_case.id


def test_stored_bm25_is_read_without_bm25s_and_stays_bm25s_format(tmp_path) -> None:
    texts = ["CUDA out of memory while allocating", "NCCL watchdog timeout rank 3", "显存不足 CUDA out of memory"]
    built = LexicalIndex.build(texts)
    built.save(tmp_path / "bm25")
    loaded = LexicalIndex.load(tmp_path / "bm25")
    for query in ("cuda memory", "nccl timeout", "显存不足", "nothing here"):
        np.testing.assert_array_equal(loaded.scores(query), built.scores(query))
    assert loaded.scores("cuda memory")[1] == 0 and loaded.scores("cuda memory")[0] > 0
    import bm25s

    theirs = bm25s.BM25.load(str(tmp_path / "bm25"))
    assert int(theirs.scores["num_docs"]) == 3 and theirs.vocab_dict == json.loads(
        (tmp_path / "bm25" / "vocab.index.json").read_text(encoding="utf-8")
    )
