"""Hostile and odd input at the command line (issue 28): endless devices and pipes, closed stdin, a
100,000-deep JSON array and a byte order mark in a batch, NUL padding from log rotation, C1 control
characters. Every case ends in one clear line or one answer object, never a traceback, and no input is
read further than the limit + 1 byte. The CLI runs as a real subprocess with the real engine."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.errors import InputTooLarge
from bot.paste import read_limited
from kb.loader import load_kb

KV_LOG = load_kb().by_id()["kv-cache-no-memory"].examples[0].log


def run_cli(args: list[str], index_dir: Path, stdin: Any = None, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), NO_COLOR="1", **env_extra)
    env.pop("VLLM_BASE_URL", None)
    kwargs: dict[str, Any] = {"input": stdin} if isinstance(stdin, bytes) else {"stdin": stdin}
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, env=env,
                          timeout=300, check=False, **kwargs)


class _Endless(io.RawIOBase):
    """/dev/zero that counts what it hands out."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), 4096)  # a pipe hands out less than asked
        buffer[:n] = b"\0" * n
        self.given += n
        return n


def test_an_endless_stream_is_read_only_to_the_limit_plus_one_byte() -> None:
    src = _Endless()
    with pytest.raises(InputTooLarge, match=r"larger than the input limit of 1 MiB \(1048576 bytes"):
        read_limited(src, 1 << 20, "stdin")  # type: ignore[arg-type]
    assert src.given == (1 << 20) + 1


def test_input_at_the_limit_is_read_whole() -> None:
    assert read_limited(io.BytesIO(b"x" * 100), 100, "f") == b"x" * 100


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_dev_zero_is_refused_in_one_line_naming_the_limit(tmp_path: Path, source: str) -> None:
    with open("/dev/zero", "rb") as zero:
        if source == "file":
            proc = run_cli(["explain", "--no-llm", "/dev/zero"], tmp_path / "index",
                           VLLM_DOCTOR_MAX_INPUT_BYTES="100000")
        else:
            proc = run_cli(["explain", "--no-llm", "-"], tmp_path / "index", stdin=zero,
                           VLLM_DOCTOR_MAX_INPUT_BYTES="100000")
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and proc.stdout == b"", err
    assert err.splitlines() == [err] and "input limit of 97.7 KiB (100000 bytes" in err, err


def test_report_draft_and_kb_add_from_a_device_are_refused(tmp_path: Path) -> None:
    env = {"VLLM_DOCTOR_MAX_INPUT_BYTES": "100000", "VLLM_DOCTOR_KB_DB": str(tmp_path / "kb.db"),
           "VLLM_DOCTOR_KB_WRITE_DIR": str(tmp_path / "cases")}
    draft = run_cli(["report-draft", "/dev/zero"], tmp_path / "index", **env)
    add = run_cli(["kb", "add", "--from-file", "/dev/zero"], tmp_path / "index", **env)
    for proc in (draft, add):
        err = proc.stderr.decode().strip()
        assert proc.returncode != 0 and "Traceback" not in err, err
        assert "input limit of 97.7 KiB" in err, err


def test_closed_stdin_is_a_specific_message(tmp_path: Path) -> None:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(tmp_path / "index"))
    proc = subprocess.run(f"{sys.executable} -m bot explain --no-llm <&-", shell=True, capture_output=True,  # noqa: S602
                          env=env, timeout=300, check=False)
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and err == "error: no input: stdin is closed; name a log file, or pipe the log in", err


def test_batch_bom_deep_json_and_an_endless_line_each_get_their_object(doctor: Any, index_dir: Path,
                                                                       tmp_path: Path) -> None:
    _ = doctor.index
    kv = json.dumps({"id": "bom", "log": KV_LOG}).encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    after = json.dumps({"id": "after", "log": KV_LOG}).encode()
    data = b"\xef\xbb\xbf" + kv + b"\n" + deep + b"\n" + after + b"\n" + b"\0" * 3_000_000  # ends in /dev/zero
    proc = run_cli(["explain", "--no-llm", "--jsonl", "-"], index_dir, stdin=data,
                   VLLM_DOCTOR_MAX_INPUT_BYTES="1000000")
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [o["id"] for o in out] == ["bom", None, "after", None]
    assert out[0]["matches"][0]["case_id"] == "kv-cache-no-memory"  # the BOM did not cost the first record
    assert out[1] == {"id": None, "verdict": "unknown", "matches": [], "error": "line 2: JSON nested too deeply"}
    assert out[2]["matches"][0]["case_id"] == "kv-cache-no-memory"
    assert out[3]["verdict"] == "unknown" and "line 4: longer than the input limit" in out[3]["error"]
