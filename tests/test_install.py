"""The venv the suite runs in is exactly requirements.lock (make setup installs it with --require-hashes)."""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", re.M)


def lock_pins() -> dict[str, Version]:
    return {canonicalize_name(n): Version(v) for n, v in PIN.findall(LOCK.read_text(encoding="utf-8"))}


def test_every_locked_package_is_installed_at_its_locked_version() -> None:
    pins = lock_pins()
    assert len(pins) > 50, "requirements.lock looks empty"
    wrong = []
    for name, want in sorted(pins.items()):
        try:
            got = Version(md.version(name))
        except md.PackageNotFoundError:
            wrong.append(f"{name}: not installed (lock {want})")
            continue
        if got != want:
            wrong.append(f"{name}: installed {got}, lock {want}")
    assert not wrong, "the venv differs from requirements.lock (run `make setup`):\n" + "\n".join(wrong)


def test_every_lock_entry_carries_a_hash() -> None:
    text = LOCK.read_text(encoding="utf-8")
    entries = re.split(r"\n(?=[A-Za-z0-9])", text[text.index("\n", text.index("==") - 40):])
    unhashed = [e.split()[0] for e in entries if "==" in e and "--hash=sha256:" not in e]
    assert not unhashed, unhashed


def test_the_lock_satisfies_pyproject_and_a_stale_one_is_named_in_one_line(tmp_path: Path) -> None:
    check = REPO / "scripts" / "check_lock.py"
    ok = subprocess.run([sys.executable, str(check)], capture_output=True, text=True, check=False, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    # A copy of the project whose pyproject asks for a version the lock does not have.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "check_lock.py").write_text(check.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "requirements.lock").write_text(LOCK.read_text(encoding="utf-8"), encoding="utf-8")
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(project.replace('"pyyaml>=6.0,<7"', '"pyyaml>=99"'), encoding="utf-8")
    stale = subprocess.run([sys.executable, str(tmp_path / "scripts" / "check_lock.py")], capture_output=True,
                           text=True, check=False)
    assert stale.returncode == 1
    lines = stale.stderr.strip().splitlines()
    assert len(lines) == 1 and "pyyaml==" in lines[0] and "make lock" in lines[0], stale.stderr
