"""Self-test of the bundled KB: every example is recognised as its own case, signatures are exact
fingerprints (they hit their examples and never fire on a healthy start-up), referenced checks exist."""

from __future__ import annotations

import pytest

from bot.diagnosis.distill import distill
from bot.diagnosis.match import SignatureScanner
from bot.models import Note
from kb.loader import load_kb

KB = load_kb()
EXAMPLES = [(case.id, i, ex.log) for case in KB.cases for i, ex in enumerate(case.examples)]


@pytest.mark.parametrize(("case_id", "n", "log"), EXAMPLES, ids=[f"{c}#{n}" for c, n, _ in EXAMPLES])
def test_each_example_hits_its_own_signature(case_id: str, n: int, log: str) -> None:
    case = KB.by_id()[case_id]
    hits = SignatureScanner([case]).scan(distill(log).cleaned)
    assert case_id in hits, f"{case_id} example {n}: no signature of the case matches its own example"


def test_no_signature_fires_on_healthy_startup(healthy_logs: dict[str, str]) -> None:
    scanner = SignatureScanner(KB.cases)
    for name, text in healthy_logs.items():
        hits = scanner.scan(distill(text).cleaned)
        assert not hits, f"{name}: signatures fired on a healthy start-up: " + "; ".join(
            f"{cid}: {h[0].line.text[:100]!r} ~ {h[0].pattern!r}" for cid, h in hits.items()
        )


@pytest.mark.parametrize(("case_id", "n", "log"), EXAMPLES, ids=[f"{c}#{n}" for c, n, _ in EXAMPLES])
def test_each_example_is_diagnosed_as_its_case(doctor, case_id: str, n: int, log: str) -> None:
    d = doctor.match(log)
    ids = [m.case_id for m in d.matches]
    if KB.by_id()[case_id].role == "symptom":
        assert case_id in ids[:3], f"{case_id}#{n} not in top-3: {ids}"
    else:
        assert ids and ids[0] == case_id, f"{case_id}#{n} ranked {ids[:3]} ({d.verdict})"
        if d.distilled.truncated and d.verdict != "match":
            # a real paste cut inside its traceback: answered from its frames, at most "uncertain", and said so
            assert d.verdict == "uncertain" and Note("truncated") in d.notes
        else:
            assert d.verdict == "match"


def test_case_checks_exist_and_point_back() -> None:
    """A case's `checks` are real catalogue ids, and each such check names the case among its rules."""
    from kb.checks_schema import load_checks

    referenced = load_checks().referenced_cases()
    for case in KB.cases:
        for check_id in case.checks:
            assert check_id in referenced, f"{case.id}: unknown check {check_id!r}"
            assert case.id in referenced[check_id], f"{case.id}: check {check_id} never points to this case"
    for check_id, case_ids in referenced.items():
        for case_id in case_ids:
            assert check_id in KB.by_id()[case_id].checks, f"{case_id} should list {check_id} in `checks`"


def test_every_bundled_case_has_its_chinese_text() -> None:
    """Chinese summary, cause, keywords and every fix step's text (cases filed from Slack may lack them)."""
    from kb.loader import missing_chinese

    problems = [str(err) for err in missing_chinese()]
    assert problems == [], "\n".join(problems)


def test_missing_chinese_names_the_file_and_the_field(tmp_path) -> None:
    from kb.loader import DEFAULT_CASES_DIR, missing_chinese

    source = DEFAULT_CASES_DIR / "serving" / "port-in-use.yaml"
    (tmp_path / "serving").mkdir()
    target = tmp_path / "serving" / "port-in-use.yaml"
    kept = [ln for ln in source.read_text(encoding="utf-8").splitlines() if not ln.lstrip().startswith(("cause_zh:", "text_zh:"))]
    target.write_text("\n".join(kept) + "\n", encoding="utf-8")
    [err] = missing_chinese(tmp_path)
    assert err.path == str(target)
    assert "field 'cause_zh'" in str(err) and "field 'fix.0.text_zh'" in str(err) and "summary_zh" not in str(err)
