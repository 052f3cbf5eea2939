"""The `vllm-doctor` CLI, run as a real subprocess: batch contract, human/JSON output, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb.loader import load_kb

KB = load_kb()
CASE = KB.by_id()["kv-cache-no-memory"]


def run_cli(args: list[str], index_dir: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(index_dir), NO_COLOR="1")
    env.pop("VLLM_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], input=stdin, capture_output=True, env=env, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def built_index(doctor, index_dir: Path) -> Path:
    """The session doctor has already built the index in index_dir: the CLI reuses it."""
    return index_dir


def test_batch_contract_one_object_per_line_in_order(built_index: Path, tmp_path: Path) -> None:
    lines = [
        {"id": "a", "log": CASE.examples[0].log},
        {"id": 2, "log": ""},
        "not json at all",
        {"id": "c", "log": "hello world, nothing wrong here"},
        {"id": "d"},
        {"id": "e", "log": KB.by_id()["port-in-use"].examples[0].log},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    proc = run_cli(["explain", "--no-llm", "--jsonl", str(src)], built_index)
    assert proc.returncode == 0, proc.stderr.decode()
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert len(out) == len(lines)
    assert [o["id"] for o in out] == ["a", 2, None, "c", "d", "e"]
    for o in out:
        # documented keys unchanged; "facts" is the one added key (what the log says about the setup)
        assert set(o) <= {"id", "verdict", "matches", "error", "facts", "root"} and o["verdict"] in (
            "match", "uncertain", "unknown")
        assert "root" in o and (o["root"] is None or set(o["root"]) == {"line", "text", "component", "raised_at"})
        assert isinstance(o.get("facts", {}), dict)
        assert len(o["matches"]) <= 5
        for m in o["matches"]:
            assert set(m) == {"case_id", "title", "score", "evidence"}
    assert out[0]["verdict"] == "match" and out[0]["matches"][0]["case_id"] == "kv-cache-no-memory"
    assert out[0]["matches"][0]["evidence"][0]["why"].startswith("signature")
    assert out[0]["facts"]["python_version"] == {"value": "3.12", "line": 1}  # from its site-packages path
    assert out[0]["root"]["component"] == "gpu-memory" and "No available memory" in out[0]["root"]["text"]
    assert out[1]["root"] is None  # an error object has the key too
    assert "empty" in out[1]["error"]
    assert "invalid JSON" in out[2]["error"] or "Expecting value" in out[2]["error"]
    assert out[3]["verdict"] in ("unknown", "uncertain")
    assert "log" in out[4]["error"]
    assert out[5]["matches"][0]["case_id"] == "port-in-use"
    scores = [m["score"] for m in out[0]["matches"]]
    assert scores == sorted(scores, reverse=True)


def test_explain_json_and_text(built_index: Path, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(CASE.examples[1].log, encoding="utf-8")
    proc = run_cli(["explain", "--no-llm", "--json", str(log)], built_index)
    assert proc.returncode == 0, proc.stderr.decode()
    obj = json.loads(proc.stdout)
    assert obj["verdict"] == "match" and obj["matches"][0]["case_id"] == "kv-cache-no-memory"
    assert obj["explanation"] is None
    assert obj["also_noticed"] == [] and obj["facts"]["python_version"]["value"] == "3.13"
    # this real paste ends at the `raise ValueError("No available memory …")` line of its traceback: the
    # fingerprint is there, so it stays a match, and the answer says the final error line is missing
    assert obj["truncated"] is True and any("final error line is missing" in n for n in obj["notes"])
    proc = run_cli(["explain", "--no-llm", "-"], built_index, stdin=CASE.examples[1].log.encode())
    text = proc.stdout.decode()
    assert "MATCH" in text and "kv-cache-no-memory" in text and "Fix:" in text
    assert "\x1b[" not in text  # no colour when not a terminal


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "empty"),
        (b"\x00\x01\x02ELF" * 100, "binary"),
    ],
)
def test_bad_input_gets_a_clear_error(built_index: Path, payload: bytes, message: str) -> None:
    proc = run_cli(["explain", "--no-llm", "-"], built_index, stdin=payload)
    assert proc.returncode == 2
    assert message in proc.stderr.decode().lower()
    assert "Traceback" not in proc.stderr.decode()


def test_missing_file_is_a_user_error(built_index: Path) -> None:
    proc = run_cli(["explain", "/nonexistent/log.txt"], built_index)
    assert proc.returncode == 2 and "cannot read" in proc.stderr.decode()


def test_kb_list_json_and_lint_do_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys, json, io, contextlib\n"
        "from bot.cli.main import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf): rc = main(['kb', 'list', '--json'])\n"
        "rows = json.loads(buf.getvalue())\n"
        "assert rc == 0 and rows and set(rows[0]) == {'id', 'title', 'area'}\n"
        "assert 'torch' not in sys.modules, 'kb list imported torch'\n"
        "print(len(rows))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert int(proc.stdout) == len(KB.cases)


def test_kb_lint_reports_file_and_field(tmp_path: Path, built_index: Path) -> None:
    bad = tmp_path / "memory" / "bad-case.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("id: bad-case\ntitle: Short one\nfoo: 1\n", encoding="utf-8")
    proc = run_cli(["kb", "lint", str(tmp_path)], built_index)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "bad-case.yaml" in err and "field 'foo': unknown field" in err and "field 'cause': missing" in err


def test_help_and_errors_name_the_installed_command(tmp_path: Path) -> None:
    """Usage lines and hints say `vllm-doctor` (the console script in pyproject.toml), never an internal name."""
    shown = run_cli(["--help"], tmp_path)
    assert shown.returncode == 0 and shown.stdout.decode().startswith("usage: vllm-doctor ")
    missing = run_cli(["kb", "show", "no-such-case"], tmp_path)
    assert missing.returncode != 0 and "`vllm-doctor kb list`" in missing.stderr.decode()


@pytest.mark.parametrize("verbose", [False, True])
def test_third_party_warnings_go_to_the_log_not_the_terminal(verbose: bool) -> None:
    """cryptography deprecates DSA and asyncssh (the SSH runner) imports it: a user never sees that warning
    on stderr; with -v it is a debug log line."""
    code = (
        "import io, contextlib\n"
        "from bot.cli.main import main\n"
        f"args = {['-v'] if verbose else []!r} + ['kb', 'list', '--json']\n"
        "with contextlib.redirect_stdout(io.StringIO()): rc = main(args)\n"
        "import asyncssh  # noqa: F401  (the import that warns)\n"
        "import warnings; warnings.warn('a library notice', UserWarning)\n"
        "assert rc == 0\n"
    )
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    err = proc.stderr.decode()
    if verbose:
        assert "py.warnings" in err and "a library notice" in err
    else:
        assert "Warning" not in err and "a library notice" not in err, err
