"""Rule evaluation and message templates (bot/runner/rules.py)."""

from __future__ import annotations

import pytest

from bot.runner.rules import FactView, evaluate, format_value, holds, render
from kb.checks_schema import Check


@pytest.mark.parametrize(
    ("op", "value", "operand", "expected"),
    [
        ("eq", 0, 0, True), ("ne", "a", "b", True), ("lt", 3, 4, True), ("ge", 4, 4, True),
        ("gt", "5", 4, False),  # strings are not numbers
        ("gt", True, 0, False),  # nor are booleans
        ("version_lt", "12.2", "12.8", True), ("version_lt", "12.10", "12.9", False),
        ("version_ge", "535.104.05", "535.86", True), ("version_lt", "unknown", "2.28", False),
        ("matches", "Driver/library version mismatch", "library version", True),
        ("not_matches", "ok", "fail", True), ("contains", ["a", "b"], "b", True),
        ("not_contains", ["tiny"], "llama", True), ("in", "x", ["x", "y"], True), ("not_in", "z", ["x"], True),
        ("exists", None, False, True), ("exists", 0, True, True), ("empty", [], True, True),
        ("empty", None, True, True), ("empty", "text", False, True),
        ("eq", None, None, False), ("lt", None, 3, False), ("matches", None, "x", False),
    ],
)
def test_operators(op, value, operand, expected):
    assert holds(op, value, operand) is expected


def _check(rules: list[dict], parser: str = "nvidia_smi_header", needs: list[str] | None = None) -> Check:
    data = {"id": "gpu.t", "title": "test check", "tier": 0, "rules": rules}
    if needs:
        data["needs"] = needs
    else:
        data["argv"], data["parser"] = ["true"], parser
    return Check.model_validate(data)


def test_first_matching_rule_wins_and_all_conditions_must_hold():
    check = _check([
        {"when": {"rc": {"ne": 0}, "error": {"matches": "mismatch"}}, "verdict": "fail", "message": "A {error}",
         "cases": ["nvml-driver-library-mismatch"]},
        {"when": {"rc": {"ne": 0}}, "verdict": "warn", "message": "B rc={rc}"},
        {"verdict": "ok", "message": "C {driver_version}"},
    ])
    view = FactView({"rc": 18, "error": "Driver/library version mismatch"}, {}, {})
    outcome = evaluate(check, view)
    assert (outcome.verdict, outcome.message, outcome.cases) == ("fail", "A Driver/library version mismatch",
                                                                ("nvml-driver-library-mismatch",))
    assert evaluate(check, FactView({"rc": 9, "error": "other"}, {}, {})).message == "B rc=9"
    assert evaluate(check, FactView({"rc": 0, "driver_version": "570.1"}, {}, {})).message == "C 570.1"


def test_fact_references_across_checks_and_host_fields():
    check = _check([
        {"when": {"gpu.driver:cuda_major": {"lt": {"fact": "python.torch:cuda_major"}}}, "verdict": "fail",
         "message": "driver CUDA {gpu.driver:cuda_version} < torch {python.torch:cuda} on {host:expected_gpus} GPUs"},
        {"verdict": "ok", "message": "fine"},
    ], needs=["gpu.driver", "python.torch"])
    view = FactView({}, {"gpu.driver": {"cuda_major": 11, "cuda_version": "11.4"},
                         "python.torch": {"cuda_major": 12, "cuda": "12.8"}}, {"expected_gpus": 8})
    assert evaluate(check, view).message == "driver CUDA 11.4 < torch 12.8 on 8 GPUs"
    missing = FactView({}, {"gpu.driver": {"cuda_major": 11}, "python.torch": {}}, {})
    assert evaluate(check, missing).verdict == "ok"  # a missing operand never fires a rule


def test_map_facts_and_filters():
    view = FactView({"vars": {"HF_HUB_OFFLINE": "1"}, "size": 64 * 2**20, "kv": 0.9712, "mib": 81559,
                     "names": ["a", "b"], "empty": [], "flag": True, "err": "line 1\n\nlast line\n"}, {}, {})
    assert view.get("vars.HF_HUB_OFFLINE") == "1" and view.get("vars.NOPE") is None and view.get("size.x") is None
    assert render("{size|bytes} {kv|pct} {mib|mib} {names} {empty} {flag} {err|last_line} {nope}", view) == \
        "64 MiB 97.1 % 79.6 GiB a, b none yes last line ?"
    assert format_value(1.5) == "1.5" and format_value(0.333333, "round") == "0.33"
