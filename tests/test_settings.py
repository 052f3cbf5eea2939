"""Settings: every one is documented in docs/settings.md; env and YAML file sources; bad files are clear errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.settings import Settings, env_name

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")  # the settings table


def env_names() -> list[str]:
    return [env_name(name) for name in Settings.model_fields]


@pytest.mark.parametrize("env", env_names())
def test_every_setting_is_in_the_readme_table(env: str) -> None:
    assert f"| `{env}` |" in README, f"{env} missing from the settings table in docs/settings.md (scripts/settings_table.py --write)"


def test_the_readme_table_is_the_generated_one() -> None:
    """scripts/settings_table.py writes the table from bot/settings.py; a hand edit or a new setting
    without `--write` fails here."""
    spec = importlib.util.spec_from_file_location("settings_table", REPO / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    start, end = "<!-- settings:start -->\n", "\n<!-- settings:end -->"
    assert README.split(start, 1)[1].split(end, 1)[0] == module.table()


@pytest.mark.parametrize(
    ("field", "env"),
    [("kb_dir", "VLLM_DOCTOR_KB_DIR"), ("runner_max_channels_per_host", "VLLM_DOCTOR_SSH_MAX_SESSIONS"),
     ("slack_bot_token", "SLACK_BOT_TOKEN"), ("llm_language", "VLLM_DOCTOR_LANGUAGE")],
)
def test_grouped_settings_keep_their_environment_names(field: str, env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefix names most fields, an explicit alias the older ones; both reach the same flat field."""
    assert env_name(field) == env
    monkeypatch.delenv("VLLM_DOCTOR_CONFIG", raising=False)
    value = {"kb_dir": "/srv/kb", "runner_max_channels_per_host": "3", "slack_bot_token": "xoxb-1",
             "llm_language": "zh"}[field]
    monkeypatch.setenv(env, value)
    assert str(getattr(Settings(), field)) == value


def test_every_setting_has_a_description() -> None:
    missing = [n for n, f in Settings.model_fields.items() if not f.description]
    assert not missing


def test_env_beats_yaml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "doctor.yaml"
    cfg.write_text("VLLM_BASE_URL: http://from-file:8000/v1\nvllm_doctor_llm_timeout: 7\n", encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CONFIG", str(cfg))
    monkeypatch.delenv("VLLM_BASE_URL", raising=False)
    s = Settings()
    assert s.vllm_base_url == "http://from-file:8000/v1" and s.llm_timeout_s == 7
    monkeypatch.setenv("VLLM_BASE_URL", "http://from-env:8000/v1")
    assert Settings().vllm_base_url == "http://from-env:8000/v1"


@pytest.mark.parametrize("content", ["a: [unclosed\n", "- just\n- a list\n"])
def test_bad_settings_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    cfg = tmp_path / "doctor.yaml"
    cfg.write_text(content, encoding="utf-8")
    monkeypatch.setenv("VLLM_DOCTOR_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match=str(cfg)):
        Settings()


def test_missing_settings_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_DOCTOR_CONFIG", "/nonexistent/doctor.yaml")
    with pytest.raises(ConfigError, match="nonexistent"):
        Settings()
