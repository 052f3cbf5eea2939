"""Keep the design honest (README "How the code is laid out", AGENTS.md):

    kb  ←  indexer  ←  stages (bot/diagnosis, bot/present, bot/explain, …)  ←  pipeline (bot/pipeline.py)
        ←  eval harness (bot/evaluation)  ←  {cli, slack}

A module imports only its own layer or lower ones; the runner and the indexer never import Slack; there
is no import cycle anywhere (lazy and TYPE_CHECKING imports included: a cycle is a design smell even when
Python tolerates it); each heavy library is imported in exactly one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = {
    "slack_bolt": "bot/slack/app.py",
    "waitress": "bot/slack/app.py",
    "openai": "bot/explain/llm.py",
    "jinja2": "bot/explain/prompt.py",
    "asyncssh": "bot/runner/ssh.py",
    "sentence_transformers": "indexer/encoder.py",
    "transformers": "indexer/encoder.py",
    "onnxruntime": "indexer/onnx_encoder.py",
    "onnx": "indexer/encoder.py",  # the export only
    "tokenizers": "indexer/onnx_encoder.py",
    "faiss": "indexer/store.py",
    "bm25s": "indexer/lexical.py",
    "rjieba": "indexer/segment.py",
    "psycopg": "bot/storage/postgres.py",
    "psycopg_pool": "bot/storage/postgres.py",
    "prometheus_client": "bot/ops/metrics.py",
    "matplotlib": "bot/present/pictures.py",
    "ahocorasick_rs": "indexer/literals.py",
    "re2": "bot/kb_growth/regex_safety.py",
    "sklearn": "bot/evaluation/ranker_train.py",
}
LAYERS = ("kb", "indexer", "stages", "pipeline", "eval harness", "edges")


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


SOURCES = sorted(p for pkg in ("bot", "kb", "indexer") for p in (REPO / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SOURCES}


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (a name imported from a package: the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(name: str) -> set[str]:
    """Project modules `name` imports anywhere in its body (top level, functions, TYPE_CHECKING)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(r for a in node.names if (r := _resolve(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.update(r for a in node.names if (r := _resolve(f"{base}.{a.name}")))
    found.discard(name)
    return found


GRAPH = {name: module_imports(name) for name in MODULES}


def layer(name: str) -> int:
    top = name.split(".")
    if top[0] in ("kb", "indexer"):
        return LAYERS.index(top[0])
    if name == "bot.pipeline":
        return LAYERS.index("pipeline")
    if top[:2] == ["bot", "evaluation"]:
        return LAYERS.index("eval harness")
    if name == "bot.__main__" or top[:2] in (["bot", "cli"], ["bot", "slack"]):
        return LAYERS.index("edges")
    return LAYERS.index("stages")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.parametrize(("library", "owner"), HEAVY.items())
def test_heavy_library_imported_in_exactly_one_module(library: str, owner: str) -> None:
    users = [str(p.relative_to(REPO)) for p in SOURCES if library in imports_of(p)]
    assert users == [owner]


def test_layers_point_one_way() -> None:
    wrong = [
        f"{name} ({LAYERS[layer(name)]}) imports {dep} ({LAYERS[layer(dep)]})"
        for name, deps in GRAPH.items()
        for dep in sorted(deps)
        if layer(dep) > layer(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_runner_and_indexer_never_import_slack_and_slack_never_imports_the_cli() -> None:
    wrong = [
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        for dep in deps
        if (name.startswith(("bot.runner", "indexer")) and dep.startswith("bot.slack"))
        or (name.startswith("bot.slack") and dep.startswith("bot.cli"))
    ]
    assert not wrong


def test_no_import_cycle_anywhere() -> None:
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles() -> None:
    """The contract above is only as good as this: a two-module and a three-module cycle are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "a"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """Imports inside functions count: the host flow Pipeline.diagnose hands to reaches the runner engine lazily."""
    assert "bot.host_flow" in GRAPH["bot.pipeline"] and "bot.runner.engine" in GRAPH["bot.host_flow"]
    assert "bot.pipeline" in GRAPH["bot.slack.hosts"]
    assert layer("bot.slack.reply.answer") == layer("bot.cli.main") > layer("bot.pipeline") > layer("bot.diagnosis.match")


def reachable(name: str, graph: dict[str, set[str]]) -> set[str]:
    """Every project module `name` imports, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep in graph.get(todo.pop(), set()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


RANKING = ("bot.diagnosis.match", "bot.diagnosis.ranker", "bot.diagnosis.versions")


@pytest.mark.parametrize("name", RANKING)
def test_ranking_produces_values_and_never_words_them(name: str) -> None:
    """Text at the edge (issue 30): ranking returns typed findings (bot.models.Note); only the presentation
    (bot/present/render.py, bot/slack/reply/, the JSON edge) words them through bot.present.i18n, directly or not."""
    assert "bot.present.i18n" not in reachable(name, GRAPH)


def test_reachable_follows_imports_through_other_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert reachable("a", graph) == {"b", "c"} and "bot.present.i18n" in reachable("bot.present.render", GRAPH)


def test_one_language_type() -> None:
    """`Language` is defined once, in bot/models.py; every other module imports that one."""
    owners = [
        module_name(p) for p in SOURCES
        for node in ast.parse(p.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(isinstance(t, ast.Name) and t.id == "Language"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    ]
    assert owners == ["bot.models"]


def test_bot_keeps_the_composition_root_and_what_every_layer_shares() -> None:
    """Packages by concern (issue 30): bot/ itself holds the composition root, its two services and the shared
    values, settings and errors; every stage lives in a package that says which flow it serves."""
    top = sorted(p.name for p in (REPO / "bot").glob("*.py"))
    assert len(top) <= 8, top
    assert {"pipeline.py", "models.py", "settings.py", "errors.py"} <= set(top)
    for package in ("diagnosis", "evaluation", "present"):
        assert (REPO / "bot" / package / "__init__.py").exists()
