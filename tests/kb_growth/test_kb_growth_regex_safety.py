"""A signature submitted by a user cannot stall the bot (issue 28): `(\\w+\\s?)*$` once ran at 100 % CPU
for 300 s while `kb add` linted it against the healthy logs. New signatures are checked with RE2 and for
nested unbounded quantifiers before any log is scanned (bot/kb_growth/regex_safety.py); the curated KB's
own signatures (some use lookaheads) still load, match and can be edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kb_growth_support import NOFILE_CASE_YAML
from test_kb_growth_engine import _kb

from bot.errors import InvalidCase
from bot.kb_growth.form import case_to_form
from bot.kb_growth.regex_safety import unsafe_signature
from kb.loader import load_kb


@pytest.mark.parametrize(("pattern", "words"), [
    (r"(\w+\s?)*$", "repeats a group that itself repeats"),
    (r"(a+)+b", "repeats a group that itself repeats"),
    (r"(?:x|y+)*z", "repeats a group that itself repeats"),
    (r"(?=CUDA)CUDA error", "lookarounds"),
    (r"(?<!no )GPU", "lookarounds"),
    (r"(\w+) again \1", "backreferences"),
    (r"\w++ failed", "possessive"),
    (r"(?>a+)b", "atomic"),
])
def test_backtracking_shapes_are_refused_with_a_reason(pattern: str, words: str) -> None:
    why = unsafe_signature(pattern)
    assert why is not None and words in why and repr(pattern) in why and "\n" not in why


@pytest.mark.parametrize("pattern", [
    r"OSError: \[Errno 24\] Too many open files",
    r"CUDA error: out of memory",
    r"ValueError: .* is not supported",
    r"No available memory for the cache blocks",
    r"(?P<what>CUDA|NCCL) error: \w+ failed",
    r"version \d+\.\d+\.\d+ of [\w-]+ required",
])
def test_ordinary_signatures_pass(pattern: str) -> None:
    assert unsafe_signature(pattern) is None


def test_most_curated_signatures_would_pass_as_new_ones() -> None:
    patterns = [p for case in load_kb().cases for p in case.signatures]
    refused = [p for p in patterns if unsafe_signature(p) is not None]
    assert len(refused) <= 12 and len(patterns) >= 200  # lookaheads in 9, nested repeats in 2: reviewed in git


def test_cli_add_refuses_a_catastrophic_signature_before_scanning_any_log(grow_settings: Any, tmp_path: Path) -> None:
    data = yaml.safe_load(NOFILE_CASE_YAML)
    data["signatures"] = [r"OSError: \[Errno 24\] Too many open files", r"Too many open files: (\w+\s?)*$"]
    # a line that `re` needs ~2^40 steps to reject: were the signature scanned, this test would hang
    data["examples"][0]["log"] = "ERROR OSError: [Errno 24] Too many open files: " + "a" * 40 + "!\n"
    path = tmp_path / "redos.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    rc, _, err = _kb(grow_settings, "add", "--from-file", str(path))
    assert rc == 1 and "field 'signatures'" in err and "repeats a group that itself repeats" in err, err
    assert "Traceback" not in err
    assert not list(Path(grow_settings.kb_dir).glob("*/too-many-open-files*.yaml"))


def test_slack_form_validation_refuses_it_too(growth: Any) -> None:
    form = case_to_form(load_kb().by_id()["kv-cache-no-memory"])
    form.case_id = "kv-cache-copy"
    form.signatures += "\n(?<=x)No available memory"
    with pytest.raises(InvalidCase) as caught:
        growth.validate(form)
    assert "lookarounds" in caught.value.problems["signatures"]


def test_a_curated_case_with_a_lookahead_can_still_be_edited(growth: Any) -> None:
    case = next(c for c in growth.pipeline.kb.cases if any("(?!" in p for p in c.signatures))
    form = case_to_form(case)
    form.title = case.title + " (edited)"
    edited, _ = growth.validate(form, replacing=case.id)
    assert edited.signatures == case.signatures
