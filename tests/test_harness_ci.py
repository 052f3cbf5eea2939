"""The test harnesses fail instead of skipping on CI, whatever truthy spelling the CI uses for CI."""

from __future__ import annotations

import pytest
import sshd_support


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes", " Yes "])
def test_missing_sshd_fails_on_ci(monkeypatch, value):
    monkeypatch.setattr(sshd_support, "sshd_path", lambda: None)
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="CI must install it"):
        sshd_support.require_sshd()


@pytest.mark.parametrize("value", [None, "", "0", "false", "no"])
def test_missing_sshd_skips_elsewhere(monkeypatch, value):
    monkeypatch.setattr(sshd_support, "sshd_path", lambda: None)
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception):
        sshd_support.require_sshd()
