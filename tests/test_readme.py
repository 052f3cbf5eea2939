"""The README's first lines give the two commands, and its concept → file map points at files that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_first_lines_give_the_two_commands() -> None:
    head = README.splitlines()[:8]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_concept_map_paths_exist() -> None:
    table = README.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    paths = []
    for row in table.splitlines():
        if row.startswith("|") and "`" in row:
            cell = row.rsplit("|", 2)[-2]
            paths += re.findall(r"`([^`\s]+)`", cell)
    assert len(paths) > 20
    missing = []
    for p in paths:
        p = re.sub(r"<[^>]+>", "*", p).replace("{", "").replace("}", "")
        if "," in p:  # bot/slack/{events,commands}/ → check the parent
            p = p.split("/")[0]
        if not list(REPO.glob(p.rstrip("/"))):
            missing.append(p)
    assert not missing, f"README map names missing paths: {missing}"
