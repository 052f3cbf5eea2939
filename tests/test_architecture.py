"""Keep the design honest (issue 13): the layer contract, no import cycles, each heavy library in one module.

Layers, lowest first; a module may import its own layer and the ones below, never above:

    kb ← indexer ← stages ← pipeline ← features ← edges {cli, slack}

Every import counts, also the lazy ones inside functions and those under TYPE_CHECKING: an upward import
is a wrong dependency even when it is only taken late.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "kb", "indexer")
HEAVY = {
    "slack_bolt": "bot/slack/app.py",
    "openai": "bot/explain/llm.py",
    "asyncssh": "bot/runner/ssh.py",
    "sentence_transformers": "indexer/encoder.py",
    "faiss": "indexer/store.py",
}
# Layer of a module: the longest matching prefix wins.
LAYERS = {
    "kb": 0,
    "indexer": 1,
    "bot.models": 2,  # stage values, errors and settings: every stage may use them
    "bot.errors": 2,
    "bot.settings": 2,
    "bot.redact": 2,
    "bot.distill": 2,
    "bot.facts": 2,
    "bot.match": 2,
    "bot.explain": 2,
    "bot.runner": 2,
    "bot.pipeline": 3,
    "bot.evaluate": 4,  # features built on a Pipeline, shared by both edges
    "bot.render": 4,
    "bot.kb_growth": 4,
    "bot.cli": 5,
    "bot.slack": 5,
    "bot.__main__": 5,
    "bot": 5,  # the package itself
}
LAYER_NAMES = {0: "kb", 1: "indexer", 2: "stages", 3: "pipeline", 4: "features", 5: "edges"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


SOURCES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if "checks/scripts" not in p.as_posix())
MODULES = {module_name(p): p for p in SOURCES}


def imports_of(path: Path) -> set[str]:
    """Top-level names of everything `path` imports (absolute imports; the project uses no relative ones)."""
    return {name.split(".")[0] for name in imported_modules(path)} | _third_party_roots(path)


def _third_party_roots(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@cache
def imported_modules(path: Path) -> frozenset[str]:
    """Project modules `path` imports: `from a.b import c` counts as a.b.c when that is a module, else a.b."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            assert node.level == 0, f"{path}: relative import"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return frozenset(found)


def layer(module: str) -> int:
    best = max((prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")), key=len)
    return LAYERS[best]


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        assert layer(module) in LAYER_NAMES, module


@pytest.mark.parametrize(("library", "owner"), HEAVY.items())
def test_heavy_library_imported_in_exactly_one_module(library: str, owner: str) -> None:
    users = [str(p.relative_to(REPO)) for p in SOURCES if library in imports_of(p)]
    assert users == [owner]


def test_layers_point_one_way() -> None:
    wrong = []
    for module, path in MODULES.items():
        for target in imported_modules(path):
            if layer(target) > layer(module):
                wrong.append(f"{module} ({LAYER_NAMES[layer(module)]}) imports {target} ({LAYER_NAMES[layer(target)]})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", ["bot.runner", "indexer", "kb", "bot.explain", "bot.pipeline"])
def test_stages_never_import_slack_or_cli(package: str) -> None:
    for module, path in MODULES.items():
        if module == package or module.startswith(package + "."):
            edges = [t for t in imported_modules(path) if t.startswith(("bot.slack", "bot.cli"))]
            assert not edges, f"{module} imports {edges}"


def test_slack_never_imports_the_cli() -> None:
    for module, path in MODULES.items():
        if module.startswith("bot.slack"):
            assert not [t for t in imported_modules(path) if t.startswith("bot.cli")], module


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path a → … → a, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(graph):
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles() -> None:
    graph = {m: {t for t in imported_modules(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])
