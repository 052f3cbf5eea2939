"""Bot replicas as separate `vllm-doctor serve --http` processes, for the scale-out tests and
bench/bench_replicas.py: started with an environment, ready when /readyz answers 200, logs in a file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slack_support import BOT_TOKEN, SIGNING_SECRET, SlackSender
from sshd_support import _free_port

REPO = Path(__file__).resolve().parents[2]


def replica_env(slack_url: str, db_url: str, index_dir: Path, fleet: Any | None = None, **extra: str) -> dict[str, str]:
    """The environment of a replica: the fake Slack, the shared database, the session's prebuilt index,
    JSON logs, and (given a tests.runner_support.Fleet) its inventory and sshd host keys."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        "VLLM_DOCTOR_INDEX_DIR": str(index_dir),
        "VLLM_DOCTOR_DATABASE_URL": db_url,
        "VLLM_DOCTOR_LOG_FORMAT": "json",
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET, "SLACK_API_URL": slack_url,
        "VLLM_DOCTOR_HTTP_HOST": "127.0.0.1",
        "VLLM_DOCTOR_SLACK_UPDATE_INTERVAL": "0.2",
    }
    if fleet is not None:
        env |= {
            "VLLM_DOCTOR_INVENTORY": str(fleet.inventory_path),
            "VLLM_DOCTOR_KNOWN_HOSTS": str(fleet.harness.known_hosts),
            "VLLM_DOCTOR_SSH_CONFIG": str(fleet.inventory_path.parent / "ssh_config"),
        }
    for key in ("VLLM_BASE_URL", "VLLM_DOCTOR_CONFIG"):
        env.pop(key, None)
    return env | extra


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def sender(self) -> SlackSender:
        return SlackSender(self.url + "/slack/events")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:  # an HTTPError holds the response and its socket until closed
                return exc.code, exc.read().decode()


def start_replica(env: dict[str, str], workdir: Path, n: int) -> Replica:
    port = _free_port(["127.0.0.1"])
    log = workdir / f"replica-{n}.log"
    with log.open("wb") as out:  # the child has its own copy of the descriptor; ours is closed here
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli.main", "serve", "--http", "--port", str(port)],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Replica(proc, f"http://127.0.0.1:{port}", log)


def wait_ready(replica: Replica, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if replica.proc.poll() is not None:
            raise AssertionError(f"replica exited {replica.proc.returncode}:\n{replica.log.read_text()[-3000:]}")
        try:
            if replica.get("/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"replica not ready:\n{replica.log.read_text()[-3000:]}")
