"""Does requirements.lock satisfy pyproject.toml? One line and exit 1 when it does not.

Run by `make setup` before anything is installed, with the machine's own Python (stdlib + the packaging
copy that pip vendors), so a stale lock is named before a venv is touched.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

REFRESH = "refresh it with `make lock`"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def main(root: Path) -> int:
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for r in project["optional-dependencies"]["test"]]
    lock_path = root / "requirements.lock"
    if not lock_path.is_file():
        print(f"setup: {lock_path.name} is missing; {REFRESH}", file=sys.stderr)
        return 1
    pins: dict[str, Version] = {}
    for line in lock_path.read_text(encoding="utf-8").splitlines():
        m = PIN.match(line)
        if m:
            pins[canonicalize_name(m.group(1))] = Version(m.group(2))
    problems = []
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate():
            continue
        got = pins.get(canonicalize_name(req.name))
        if got is None:
            problems.append(f"{req.name} is not in the lock")
        elif not req.specifier.contains(got, prereleases=True):
            problems.append(f"{req.name}=={got} does not satisfy '{req}'")
    if problems:
        print(f"setup: requirements.lock does not match pyproject.toml ({'; '.join(problems)}); {REFRESH}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parent.parent))
