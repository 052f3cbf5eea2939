"""No traceback reaches a user of the command line, and the batch contract holds for any input line:
lone surrogates, invalid UTF-8, bare carriage returns, a missing file or a directory, bad setting values,
a 2 MB single-line paste. The CLI runs as a real subprocess; hypothesis drives the batch reader in-process
with the real engine (one object per input line, whatever the bytes)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bot.cli.main as cli
from kb.loader import load_kb

KB = load_kb()
KV_LOG = KB.by_id()["kv-cache-no-memory"].examples[0].log


def run_cli(args: list[str], index_dir: Path, stdin: bytes | None = None, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), NO_COLOR="1", **env_extra)
    env.pop("VLLM_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "bot", *args], input=stdin, capture_output=True, env=env,
                          timeout=600, check=False)


def test_batch_survives_surrogates_invalid_utf8_and_bare_carriage_returns(doctor: Any, index_dir: Path) -> None:
    _ = doctor.index
    kv = json.dumps(KV_LOG)
    lines = [
        b'{"id": "ok", "log": ' + kv.encode() + b"}",
        b'{"id": "surrogate", "log": "RuntimeError: bad byte \\udcff in the log"}',  # escaped lone surrogate
        b'{"id": "bad-utf8", "log": "RuntimeError: \xff\xfe raw bytes"}',
        b'{"id": "cr",\r "log": ' + kv.encode() + b"}",  # a bare \r is JSON whitespace, not a record break
        b'{"id": "\\udcff-id", "log": ' + kv.encode() + b"}",  # a lone surrogate in the id itself
        b"",
        b'{"id": "last", "log": ' + kv.encode() + b"}",
    ]
    proc = run_cli(["explain", "--no-llm", "--jsonl", "-"], index_dir, stdin=b"\n".join(lines) + b"\n")
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    out = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert len(out) == len(lines)
    assert [o["id"] for o in out] == ["ok", "surrogate", None, "cr", "\udcff-id", None, "last"]
    by_id = {o["id"]: o for o in out if o["id"]}
    for answered in ("ok", "cr", "last", "\udcff-id"):
        assert by_id[answered]["matches"][0]["case_id"] == "kv-cache-no-memory", answered
    assert "error" not in by_id["surrogate"]  # answered: the surrogate became U+FFFD
    assert "line 3: not valid UTF-8" in out[2]["error"] and out[2]["verdict"] == "unknown"
    assert "empty line" in out[5]["error"]


@pytest.mark.parametrize("target", ["missing", "directory"])
def test_batch_input_that_cannot_be_read_is_one_line(tmp_path: Path, target: str) -> None:
    path = tmp_path / "nope.jsonl" if target == "missing" else tmp_path
    proc = run_cli(["explain", "--no-llm", "--jsonl", str(path)], tmp_path / "index")
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and proc.stdout == b""
    assert err.startswith(f"error: cannot read {path}") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(("name", "value", "words"), [
    ("VLLM_DOCTOR_SSH_CONNECT_TIMEOUT", "abc", "valid number"),
    ("VLLM_DOCTOR_RUNNER_ACCESS", "not json", "not valid JSON"),
])
def test_bad_setting_values_are_one_line_and_exit_2(tmp_path: Path, name: str, value: str, words: str) -> None:
    proc = run_cli(["kb", "list"], tmp_path / "index", **{name: value})
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2, err
    assert err.splitlines() == [err] and name in err and words in err and value not in err


def test_json_of_a_two_megabyte_single_line_prints_it_once(doctor: Any, index_dir: Path, tmp_path: Path) -> None:
    _ = doctor.index
    line = "RuntimeError: CUDA error: invalid device ordinal " + "x" * 2_000_000 + " end-of-line-7f3a"
    log = tmp_path / "one-line.log"
    log.write_text(line + "\n", encoding="utf-8")
    proc = run_cli(["explain", "--no-llm", "--json", str(log)], index_dir)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = proc.stdout.decode()
    assert out.count("x" * 1_999_000 + "x" * 1000 + " end-of-line-7f3a") == 1  # the whole line, once
    answer = json.loads(out)
    assert answer["evidence"][0]["text"] == line
    assert answer["matches"] and all(len(e["text"]) < 1100 for m in answer["matches"] for e in m["evidence"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.binary(max_size=200),
    st.builds(lambda t: json.dumps({"id": t, "log": t}).encode("utf-8", "surrogatepass"), st.text(max_size=200)),
    st.sampled_from([b'{"id": 1, "log": "ValueError: No available memory for the cache blocks."}', b"{", b"[]",
                     b'{"log": 5}', b"\r", b"\xef\xbb\xbf{}", b'{"id": "x", "log": "\\ud800"}']),
), max_size=8))
def test_fuzz_batch_reader_one_object_per_input_line(doctor: Any, records: list[bytes]) -> None:
    lines = [r.replace(b"\n", b" ") for r in records]  # one input line per record
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as src:
        src.write(b"\n".join(lines) + (b"\n" if lines else b""))
        src.flush()
        out = io.StringIO()
        with mock.patch.object(cli, "_pipeline", lambda: doctor), contextlib.redirect_stdout(out):
            rc = cli.main(["explain", "--no-llm", "--jsonl", src.name])
    assert rc == 0
    out.getvalue().encode("utf-8")  # writable to any UTF-8 stdout: no lone surrogate got through
    objects = [json.loads(line) for line in out.getvalue().split("\n")[:-1]]
    assert len(objects) == len(lines)
    for n, obj in enumerate(objects, 1):
        assert obj["verdict"] in ("match", "uncertain", "unknown") and len(obj["matches"]) <= 5
        if "error" in obj:
            assert obj["error"].startswith(f"line {n}: ") and obj["verdict"] == "unknown" and obj["matches"] == []
