"""The case schema is strict: every mistake is an error naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kb.loader import DEFAULT_CASES_DIR, KBError, load_case_file, load_kb

GOOD = {
    "id": "demo-case",
    "title": "A demo failure",
    "title_zh": "演示故障",
    "area": "memory",
    "severity": "high",
    "signatures": ["demo failure happened"],
    "cause": "Something specific went wrong for a demo reason.",
    "fix": [{"text": "Do the fix.", "command": "echo fix"}],
    "examples": [
        {"source": "https://github.com/o/r/issues/1", "log": "RuntimeError: demo failure happened"},
        {"source": "https://github.com/o/r/issues/2", "log": "RuntimeError: demo failure happened again"},
    ],
    "checks": [],
    "references": ["https://github.com/o/r/issues/1", "https://github.com/o/r/issues/2"],
}


def write_case(tmp_path: Path, data: dict, area: str = "memory", stem: str = "demo-case") -> Path:
    path = tmp_path / area / f"{stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_good_case_loads(tmp_path: Path) -> None:
    case = load_case_file(write_case(tmp_path, GOOD))
    assert case.id == "demo-case" and case.fix[0].command == "echo fix"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(sigantures=["x"]), "field 'sigantures': unknown field"),
        (lambda d: d.pop("cause"), "field 'cause': missing required field"),
        (lambda d: d.update(signatures=["unclosed (group"]), "bad regex"),
        (lambda d: d.update(signatures=[".*"]), "matches the empty string"),
        (lambda d: d.update(area="network"), "field 'area'"),
        (lambda d: d.update(severity="urgent"), "field 'severity'"),
        (lambda d: d.update(examples=d["examples"][:1]), "field 'examples'"),
        (lambda d: d.update(references=["https://github.com/o/r/issues/1"]), "example sources missing from references"),
        (lambda d: d["fix"][0].update(cmd="x"), "field 'fix.0.cmd': unknown field"),
        (lambda d: d.update(affects={"vllm": "not a spec"}), "bad version specifier"),
        (lambda d: d.update(affects={"vllm": "not a spec"}), "field 'affects.vllm'"),
        (lambda d: d.update(fixed_in={"vllm": "0.6.x"}), "field 'fixed_in.vllm': Value error, bad version '0.6.x'"),
        (lambda d: d.update(fixed_in={"vLLM": "0.6.4"}), "unknown package 'vLLM'"),
        (lambda d: d.update(affects={"vllm": "<0.7"}, fixed_in={"vllm": "0.6.4"}), "lies inside affects.vllm"),
        (lambda d: d.update(id="Bad_ID"), "field 'id'"),
    ],
)
def test_schema_errors_name_file_and_field(tmp_path: Path, mutate, message: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data)
    path = write_case(tmp_path, data)
    with pytest.raises(KBError) as info:
        load_case_file(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_id_must_equal_file_stem(tmp_path: Path) -> None:
    path = write_case(tmp_path, GOOD, stem="other-name")
    with pytest.raises(KBError, match="must equal the file name stem"):
        load_case_file(path)


def test_area_must_equal_folder(tmp_path: Path) -> None:
    path = write_case(tmp_path, GOOD, area="cuda")
    with pytest.raises(KBError, match="lives in cuda/"):
        load_case_file(path)


def test_malformed_yaml_reports_line(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "demo-case.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("id: demo-case\ntitle: [unclosed\ncause: x\n", encoding="utf-8")
    with pytest.raises(KBError, match=r"line \d+, column \d+: YAML syntax error"):
        load_case_file(path)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "demo-case.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"id: demo\xff\xfe\n")
    with pytest.raises(KBError, match="not UTF-8"):
        load_case_file(path)


def test_lenient_load_skips_bad_files_and_keeps_good(tmp_path: Path) -> None:
    write_case(tmp_path, GOOD)
    bad = dict(GOOD, id="broken-case", title=None)
    write_case(tmp_path, bad, stem="broken-case")
    kb = load_kb(tmp_path, strict=False)
    assert [c.id for c in kb.cases] == ["demo-case"]
    assert len(kb.errors) == 1 and "broken-case.yaml" in str(kb.errors[0])


def test_bundled_kb_is_valid_and_large_enough() -> None:
    kb = load_kb(DEFAULT_CASES_DIR)
    assert len(kb.cases) >= 50
    areas = {c.area for c in kb.cases}
    assert areas >= {"memory", "cuda", "model", "distributed", "hardware", "serving", "performance"}
    for case in kb.cases:
        assert len(case.examples) >= 2, case.id
        assert len({e.source for e in case.examples}) == len(case.examples), f"{case.id}: examples share a source"
