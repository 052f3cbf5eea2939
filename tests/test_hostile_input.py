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

from bot.diagnosis.paste import read_limited
from bot.errors import InputTooLarge
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


def test_batch_from_dev_zero_answers_its_one_endless_record_and_stops(tmp_path: Path) -> None:
    proc = run_cli(["explain", "--no-llm", "--jsonl", "/dev/zero"], tmp_path / "index",
                   VLLM_DOCTOR_MAX_INPUT_BYTES="100000")
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert len(out) == 1 and out[0]["error"].startswith("line 1: longer than the input limit of 97.7 KiB")
    assert "stopped reading: a record ran past" in err


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
    assert out[1] == {"id": None, "verdict": "unknown", "matches": [], "root": None,
                      "error": "line 2: JSON nested too deeply"}
    assert out[2]["matches"][0]["case_id"] == "kv-cache-no-memory"
    assert out[3]["verdict"] == "unknown" and "line 4: longer than the input limit" in out[3]["error"]


# -- settings: ranges, one line each, nothing secret echoed ------------------------------------------------
@pytest.mark.parametrize(("env", "named", "words"), [
    ({"VLLM_DOCTOR_MATCH_THRESHOLD": "2"}, "VLLM_DOCTOR_MATCH_THRESHOLD", "less than or equal to 1"),
    ({"VLLM_DOCTOR_MATCH_THRESHOLD": "nan"}, "VLLM_DOCTOR_MATCH_THRESHOLD", "finite number"),
    ({"VLLM_DOCTOR_MATCH_THRESHOLD": "0.5", "VLLM_DOCTOR_UNCERTAIN_THRESHOLD": "0.7"},
     "VLLM_DOCTOR_UNCERTAIN_THRESHOLD", "above VLLM_DOCTOR_MATCH_THRESHOLD"),
    ({"VLLM_DOCTOR_LLM_TIMEOUT": "-1"}, "VLLM_DOCTOR_LLM_TIMEOUT", "greater than 0"),
    ({"VLLM_DOCTOR_MAX_INPUT_BYTES": "-5"}, "VLLM_DOCTOR_MAX_INPUT_BYTES", "greater than 0"),
    ({"VLLM_DOCTOR_DATABASE_URL": "sqlite:///tmp/x-hunter2.db"}, "VLLM_DOCTOR_DATABASE_URL", "postgresql://"),
])
def test_out_of_range_settings_are_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                        named: str, words: str) -> None:
    from bot.errors import ConfigError
    from bot.settings import get_settings

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError) as caught:
            get_settings()
    finally:
        get_settings.cache_clear()
    message = str(caught.value)
    assert message.splitlines() == [message] and named in message and words in message, message
    assert "Value error" not in message and "hunter2" not in message


def test_invalid_yaml_settings_file_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "doctor.yaml"
    config.write_text("VLLM_DOCTOR_LLM_TIMEOUT: [1\nVLLM_BASE_URL: http://x\n", encoding="utf-8")
    proc = run_cli(["kb", "list"], tmp_path / "index", VLLM_DOCTOR_CONFIG=str(config))
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and err.splitlines() == [err], err
    assert err.startswith(f"error: settings file {config}: invalid YAML:") and "(line 2, column" in err, err


def test_a_kb_folder_that_does_not_exist_is_an_error_not_unknown_answers(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_text(KV_LOG, encoding="utf-8")
    missing = tmp_path / "no-such-kb"
    for args in (["explain", "--no-llm", str(log)], ["kb", "list"]):
        proc = run_cli(args, tmp_path / "index", VLLM_DOCTOR_KB_DIR=str(missing))
        err = proc.stderr.decode().strip()
        assert proc.returncode == 2 and proc.stdout == b"", err
        assert err == f"error: the KB folder {missing} does not exist (setting VLLM_DOCTOR_KB_DIR)"


def test_a_kb_folder_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    from bot.errors import ConfigError
    from bot.kb_growth.writer import LOCK_NAME, CaseWriter

    cases = tmp_path / "cases"
    (cases / LOCK_NAME).mkdir(parents=True)  # the lock file cannot be opened: as root, chmod would not stop us
    with pytest.raises(ConfigError, match=rf"cannot write to the KB folder {cases}: .*VLLM_DOCTOR_KB_WRITE_DIR"):
        with CaseWriter(cases).locked():
            pass


def test_database_url_password_is_masked_in_errors() -> None:
    from bot.errors import ConfigError
    from bot.kb_growth.db import Database

    with pytest.raises(ConfigError) as caught:
        _ = Database("postgresql://svc:S3cretPassw0rd@127.0.0.1:1/doctor").storage  # nothing listens on port 1
    assert "S3cretPassw0rd" not in str(caught.value) and "svc:***@127.0.0.1:1" in str(caught.value), caught.value
