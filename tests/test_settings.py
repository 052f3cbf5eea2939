"""Settings: every one is documented in the README; env and YAML file sources; bad files are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.settings import Settings, env_name

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def env_names() -> list[str]:
    return [env_name(name) for name in Settings.model_fields]


@pytest.mark.parametrize("env", env_names())
def test_every_setting_is_in_the_readme_table(env: str) -> None:
    assert f"| `{env}` |" in README, f"{env} missing from the README settings table (scripts/settings_table.py --write)"


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
