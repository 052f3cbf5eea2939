"""End to end through Pipeline with the real model: bad input of every kind gets a clear answer, hot reload."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from bot.errors import BinaryInput, EmptyInput, InputTooLarge
from kb.loader import DEFAULT_CASES_DIR, load_kb

KB = load_kb()
OOM = KB.by_id()["kv-cache-no-memory"].examples[0].log
PORT = KB.by_id()["port-in-use"].examples[0].log


def test_clean_paste(doctor) -> None:
    d = doctor.match(OOM)
    assert d.verdict == "match" and d.best.case_id == "kv-cache-no-memory"
    assert any("No available memory" in e.text for e in d.best.evidence)


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda s: "\n".join(f"\x1b[1;31m{line}\x1b[0m" for line in s.splitlines()), id="ansi"),
        pytest.param(lambda s: "各位大佬好，vLLM 启动报错了，求助！日志如下：\n" + s + "\n谢谢", id="chinese"),
        pytest.param(lambda s: s.encode("utf-8") + b"\n\xff\xfe trailing junk\n", id="invalid-utf8"),
        pytest.param(lambda s: "\n".join(f"(VllmWorker rank={r} pid={100 + r}) {line}" for r in range(8) for line in s.splitlines()), id="ranks"),
    ],
)
def test_messy_variants_give_the_same_answer(doctor, transform) -> None:
    d = doctor.match(transform(OOM))
    assert d.best.case_id == "kv-cache-no-memory" and d.verdict == "match"


def test_chinese_paste_sets_language(doctor) -> None:
    d = doctor.match("各位大佬好，vLLM 启动报错了，求助！日志如下：\n" + PORT)
    assert d.distilled.language == "zh" and d.best.case_id == "port-in-use"


def test_ten_megabyte_paste_with_error_at_the_end(doctor, healthy_logs) -> None:
    noise = "\n".join(healthy_logs.values())
    big = (noise + "\n") * (10_000_000 // (len(noise) + 1) + 1) + OOM
    assert len(big) > 10_000_000
    d = doctor.match(big)
    assert d.best.case_id == "kv-cache-no-memory"


@pytest.mark.parametrize(
    ("payload", "error"),
    [(b"", EmptyInput), ("  \n \r\n", EmptyInput), (b"\x00\x00\x00\x01binary" * 50, BinaryInput)],
)
def test_bad_input_raises_user_errors(doctor, payload, error) -> None:
    with pytest.raises(error) as info:
        doctor.match(payload)
    assert len(str(info.value)) > 20  # a sentence the user can act on


def test_over_the_limit(doctor, monkeypatch) -> None:
    monkeypatch.setattr(doctor.settings, "max_input_bytes", 1000)
    with pytest.raises(InputTooLarge, match="limit"):
        doctor.match("x" * 2000)


def test_ordinary_chatter_is_unknown(doctor) -> None:
    d = doctor.match("Hi team, lunch is at noon today. The new dashboards look great, thanks everyone!")
    assert d.verdict == "unknown"


def test_hand_edited_case_is_picked_up_and_a_broken_file_keeps_the_rest(tmp_path: Path) -> None:
    from bot.pipeline import Pipeline
    from bot.settings import Settings
    from indexer.encoder import HashingEncoder

    cases = tmp_path / "cases"
    shutil.copytree(DEFAULT_CASES_DIR, cases)
    doc = Pipeline(Settings(kb_dir=cases, index_dir=tmp_path / "index"))
    doc._encoder_instance = HashingEncoder()  # plumbing test: a deterministic encoder is enough here
    log = "RuntimeError: flux capacitor desynchronised on rank 3"
    assert doc.match(log).verdict != "match"

    path = cases / "serving" / "port-in-use.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["signatures"].append("flux capacitor desynchronised")
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    d = doc.match(log)
    assert d.best.case_id == "port-in-use" and d.best.signature_hit

    (cases / "memory" / "kv-cache-no-memory.yaml").write_text("id: [broken\n", encoding="utf-8")
    d = doc.match(log)  # the broken file is skipped (and logged); everything else keeps serving
    assert d.best.case_id == "port-in-use"
    assert "kv-cache-no-memory" not in doc.kb.by_id()
