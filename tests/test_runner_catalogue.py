"""The check catalogue (kb/checks): it loads, it covers the issue's tier-0 list, its rules name real
facts and real KB cases, and a broken file is rejected with its file and field named."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from bot.runner.catalogue import load_catalogue, select_checks, unknown_case_ids, validate
from kb import load_kb
from kb.checks_schema import DEFAULT_CHECKS_DIR, load_checks
from kb.loader import KBError

# One check per item of the tier-0 list (see docs/runner.md).
TIER0_REQUIRED = [
    "gpu.driver", "gpu.inventory", "cuda.driver_vs_torch", "cuda.arch", "gpu.processes", "gpu.modes",
    "gpu.ecc", "cuda.nvcc", "python.torch", "cuda.libs", "python.vllm_install", "python.vllm_import",
    "python.runtime", "system.os", "env.vars", "system.shm", "system.disk", "system.memory",
    "env.hf_access", "server.port", "server.process", "server.health", "server.models", "server.metrics",
]  # fmt: skip


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def test_bundled_catalogue_loads_and_covers_the_tier0_list(catalogue):
    tier0 = {c.id for c in catalogue.checks.values() if c.tier == 0}
    assert set(TIER0_REQUIRED) <= tier0
    assert {c.tier for c in catalogue.checks.values()} == {0, 1, 2}
    for check in catalogue.checks.values():
        assert check.why, f"{check.id} has no `why`"
        assert check.timeout_s <= 120 or check.tier == 2, f"{check.id}: tier 0/1 checks must be quick"


def test_every_referenced_case_exists_in_the_kb(catalogue):
    kb = load_kb(strict=False)
    missing = unknown_case_ids(catalogue, [c.id for c in kb.cases])
    assert not missing, f"checks point to KB cases that do not exist: {missing}"


def test_every_kb_case_check_reference_is_a_real_check(catalogue):
    kb = load_kb(strict=False)
    bad = {c.id: [x for x in c.checks if x not in catalogue.checks] for c in kb.cases}
    assert not {k: v for k, v in bad.items() if v}


def test_select_checks_adds_needed_checks_and_refuses_unknown_or_too_high_tier(catalogue):
    chosen, problems = select_checks(catalogue, ["cuda.driver_vs_torch"], 0)
    assert [c.id for c in chosen] == ["gpu.driver", "cuda.driver_vs_torch", "python.torch"] and not problems
    chosen, problems = select_checks(catalogue, ["gpu"], 0)
    assert "gpu.xid" not in {c.id for c in chosen} and "gpu.driver" in {c.id for c in chosen}
    _, problems = select_checks(catalogue, ["gpu.xid", "nope"], 0)
    assert problems[0] == "gpu.xid is a tier 1 check; ask for tier 1 to run it"
    assert problems[1].startswith("no check or area named 'nope' (areas: gpu, cuda, python, system, env, model, server;")
    chosen, problems = select_checks(catalogue, None, 2)
    assert len(chosen) == len(catalogue.checks) and not problems


def _catalogue_with(tmp_path: Path, gpu_yaml: str) -> Path:
    d = tmp_path / "checks"
    shutil.copytree(DEFAULT_CHECKS_DIR, d)
    (d / "gpu.yaml").write_text(textwrap.dedent(gpu_yaml))
    return d


GOOD_CHECK = """\
area: gpu
checks:
  - id: gpu.driver
    title: NVIDIA driver loaded
    tier: 0
    argv: [nvidia-smi]
    parser: nvidia_smi_header
    rules:
      - verdict: ok
        message: "driver {driver_version}"
"""


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("tier: 0", "tier: 3"), "field 'checks.0.tier (check gpu.driver)'"),
        (("    parser:", "    parsr:"), "field 'checks.0.parsr (check gpu.driver)': unknown field"),
        (("argv: [nvidia-smi]", "argv: [nvidia-smi]\n    script: {file: x.sh, interpreter: sh}"),
         "give exactly one of argv, script or needs"),
        (("id: gpu.driver", "id: cuda.driver"), "field 'checks.0.id': 'cuda.driver' must start with 'gpu.'"),
        (("- verdict: ok", "- when: {rc: {gt: x}}\n        verdict: ok"), "gt takes a number"),
        (("message: \"driver {driver_version}\"", "message: \"driver {driver_version|hex}\""), "unknown filter 'hex'"),
        (("argv: [nvidia-smi]", "argv: [nvidia-smi, '{user}']"), "command placeholder {user}"),
        (("requires: []", ""), None),  # no-op edit: the good file loads
    ],
)
def test_schema_errors_name_file_and_field(tmp_path, edit, expected):
    text = GOOD_CHECK.replace(*edit)
    d = _catalogue_with(tmp_path, text)
    # the bundled cuda/env checks need gpu.driver and gpu.inventory; keep only the edited file
    for other in d.glob("*.yaml"):
        if other.name != "gpu.yaml":
            other.unlink()
    if expected is None:
        validate(load_checks(d))
        return
    with pytest.raises(KBError) as err:
        validate(load_checks(d))
    assert str(err.value).startswith(str(d / "gpu.yaml"))
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ('- when: {driver_versoin: {exists: true}}\n        verdict: warn\n        message: "x y"\n      ',
         "parser nvidia_smi_header provides no fact 'driver_versoin'"),
        ('- when: {"host:gpu_count": {gt: 1}}\n        verdict: warn\n        message: "x y"\n      ',
         "host has no field 'gpu_count'"),
        ('- when: {error.key: {exists: true}}\n        verdict: warn\n        message: "x y"\n      ',
         "fact 'error' of parser nvidia_smi_header is not a map"),
    ],
)
def test_rules_may_only_name_facts_the_parser_provides(tmp_path, rules, expected):
    d = _catalogue_with(tmp_path, GOOD_CHECK.replace("- verdict: ok", rules + "- verdict: ok"))
    for other in d.glob("*.yaml"):
        if other.name != "gpu.yaml":
            other.unlink()
    with pytest.raises(KBError, match="check gpu.driver") as err:
        validate(load_checks(d))
    assert expected in str(err.value)


def test_unknown_parser_and_default_rule_position_are_rejected(tmp_path):
    d = _catalogue_with(tmp_path, GOOD_CHECK.replace("parser: nvidia_smi_header", "parser: nvidia_smi_headr"))
    for other in d.glob("*.yaml"):
        if other.name != "gpu.yaml":
            other.unlink()
    with pytest.raises(KBError, match="no parser 'nvidia_smi_headr'"):
        validate(load_checks(d))
    no_default = GOOD_CHECK.replace("- verdict: ok", "- when: {rc: {eq: 0}}\n        verdict: ok")
    d2 = _catalogue_with(tmp_path / "b", no_default)
    with pytest.raises(KBError, match="exactly the last rule must have no `when`"):
        load_checks(d2)


def test_needs_must_exist_and_not_cycle(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    (d / "gpu.yaml").write_text(textwrap.dedent("""\
        area: gpu
        checks:
          - id: gpu.a
            title: derived a
            tier: 0
            needs: [gpu.b]
            rules: [{verdict: ok, message: "fine"}]
          - id: gpu.b
            title: derived b
            tier: 0
            needs: [gpu.a]
            rules: [{verdict: ok, message: "fine"}]
        """))
    with pytest.raises(KBError, match="cycle gpu.a -> gpu.b -> gpu.a"):
        load_checks(d)
    (d / "gpu.yaml").write_text((d / "gpu.yaml").read_text().replace("needs: [gpu.a]", "needs: [gpu.zzz]"))
    with pytest.raises(KBError, match="no check 'gpu.zzz'"):
        load_checks(d)


def test_missing_script_is_named(tmp_path):
    d = _catalogue_with(tmp_path, GOOD_CHECK.replace("argv: [nvidia-smi]", "script: {file: nope.sh, interpreter: sh}"))
    with pytest.raises(KBError, match=r"checks.0.script.file' \(check gpu.driver\): .*nope.sh cannot be read"):
        load_checks(d)
