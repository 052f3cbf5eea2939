"""The entry of every user text (bot/diagnosis/paste.py): decoded, checked and redacted once, as a whole.

Secrets of 108 shapes in real vLLM log lines disappear and their line's ordinary content stays; ordinary
vLLM content (addresses, digests, GPU/MIG UUIDs, model and request ids, paths) is left intact; decoding
handles UTF-16 by BOM, dense ANSI colour, invalid UTF-8 and lone surrogates; and (hypothesis) no input
makes it raise anything but a UserInputError, line breaks are kept, and the work grows linearly.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secret_corpus import (
    KV_CACHE_TAIL,
    ORDINARY,
    PEM_BLOCK,
    PEM_CUT,
    PEM_SECRET_LINES,
    SHAPES,
    corpus_paste,
    leaks,
)

from bot.diagnosis.distill import distill
from bot.diagnosis.paste import Paste, decode_input, redacted
from bot.errors import BinaryInput, EmptyInput, UserInputError

MAX = 10_000_000


def test_corpus_has_108_shapes_and_every_issue_example() -> None:
    assert len(SHAPES) >= 108
    assert len({s.name for s in SHAPES}) == len(SHAPES) and len({s.secret for s in SHAPES}) == len(SHAPES)
    assert sum(s.name.startswith("issue:") for s in SHAPES) >= 8
    assert sum(s.name.startswith("issue28:") for s in SHAPES) >= 20


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_secret_shape_is_gone_and_its_line_kept(shape) -> None:
    paste = decode_input(shape.line, MAX)
    assert leaks(paste.text) == [], paste.text
    assert shape.marker in paste.text  # the line's ordinary content survived
    assert "[REDACTED:" in paste.text and paste.secrets >= 1


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_vllm_content_is_left_intact(line: str) -> None:
    paste = decode_input(line, MAX)
    assert paste.text == line and paste.secrets == 0


def test_pem_blocks_with_log_prefixes_or_cut_off_lose_every_body_line_and_keep_line_numbers() -> None:
    raw = f"{PEM_BLOCK}\n{PEM_CUT}\n{KV_CACHE_TAIL}\n"
    paste = decode_input(raw, MAX)
    assert not [line for line in PEM_SECRET_LINES if line in paste.text]
    assert paste.text.count("\n") == raw.count("\n")
    assert paste.text.splitlines()[-1] == KV_CACHE_TAIL
    assert all(line.startswith("(APIServer pid=1) ") for line in paste.text.splitlines()[:8])
    # distillation of the whole paste sees no key material in any line it keeps, and its line numbers
    # still point at the original paste
    d = distill(paste)
    kept = "\n".join(line.text for line in (*d.cleaned, *d.evidence))
    assert not [line for line in PEM_SECRET_LINES if line in kept]
    last = max(d.cleaned, key=lambda line: line.line_no)
    assert last.line_no == len(raw.splitlines()) and "No available memory" in last.text


def test_the_whole_corpus_as_one_paste_leaks_nothing_through_distillation() -> None:
    raw = corpus_paste()
    d = distill(raw)  # plain text is redacted by distill itself: no way around the entry
    everything = "\n".join([d.query, *(line.text for line in (*d.cleaned, *d.evidence, *d.root_errors))])
    assert leaks(everything) == []


def test_a_paste_is_made_only_at_the_entry() -> None:
    with pytest.raises(TypeError, match="made only by"):
        Paste("not redacted")
    made = redacted("HF_TOKEN=" + SHAPES[9].secret)
    assert isinstance(made, Paste) and SHAPES[9].secret not in made.text
    assert redacted(made) is made and decode_input(made, MAX) is made


# -- decoding ---------------------------------------------------------------------------------------


def test_utf16_with_bom_is_decoded_not_refused_as_binary() -> None:
    text = "ERROR 12-01 [core.py:1] ValueError: No available memory for the cache blocks.\r\n"
    for data in (b"\xff\xfe" + text.encode("utf-16-le"), b"\xfe\xff" + text.encode("utf-16-be")):
        paste = decode_input(data, MAX)
        assert paste.text == text and "UTF-16" in paste.notes[0]
    assert decode_input(b"\xef\xbb\xbf" + text.encode(), MAX).text == text


def test_densely_coloured_log_is_text() -> None:
    line = "\x1b[1;31mERROR\x1b[0m \x1b[2m12-01 10:00:00\x1b[0m \x1b[36m[core.py:1]\x1b[0m \x1b[33mOOM\x1b[0m\n"
    data = (line * 300).encode()
    assert sum(b == 0x1B for b in data[:8192]) / 8192 > 0.03  # >10 % of the bytes are ANSI sequences
    paste = decode_input(data, MAX)
    assert "ERROR" in paste.text
    assert "No available memory" in distill(paste.text + KV_CACHE_TAIL).evidence[-1].text


def test_real_binary_is_still_refused() -> None:
    with pytest.raises(BinaryInput):
        decode_input(b"\x7fELF\x02\x01\x01" + bytes(range(1, 32)) * 200, MAX)


def test_nul_padding_of_a_rotated_log_is_removed_and_the_log_read() -> None:
    data = b"\0" * 4096 + KV_CACHE_TAIL.encode() + b"\n"  # copytruncate: the old content became NULs
    paste = decode_input(data, MAX)
    assert paste.text == KV_CACHE_TAIL + "\n" and "NUL" in paste.notes[0]
    assert decode_input("\0" * 4096 + KV_CACHE_TAIL, MAX).text == KV_CACHE_TAIL
    with pytest.raises(BinaryInput):  # NULs between bytes that are not UTF-8 text: still binary
        decode_input(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(128, 256)) * 20, MAX)


def test_c1_controls_and_ansi_are_gone_before_redaction() -> None:
    paste = decode_input("ERROR \x9b31mred\x9b0m \x85x \x1b]0;title\x07ok \x1b[1mHF_TOKEN=hf_abcdefghijklm\x1b[0m"
                         "nopqrstuvwxyz0123456789 done", MAX)
    assert paste.text == "ERROR red x ok HF_TOKEN=[REDACTED:hf-token] done"
    assert redacted("a\x85b\x9f").text == "ab"


def test_lone_surrogates_become_replacement_characters() -> None:
    paste = decode_input("RuntimeError: bad \udcff byte \ud800 here", MAX)
    assert paste.text == "RuntimeError: bad \ufffd byte \ufffd here"
    assert "surrogate" in paste.notes[0]
    paste.text.encode("utf-8")  # writable anywhere


def test_bare_carriage_returns_are_line_breaks_for_distillation() -> None:
    d = distill(decode_input("progress 10%\rprogress 90%\rRuntimeError: CUDA error: out of memory\n", MAX))
    assert d.root_errors[0].line_no == 3


# -- properties -------------------------------------------------------------------------------------

# Fragments that trigger every redaction rule and the PEM line pass, mixed with arbitrary text
_FRAGMENTS = st.sampled_from([
    "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "MIIEv" + "Q" * 60, "token=", "api_key': ['",
    "://", "user:", "@host", "Authorization: Bearer ", "Cookie: ", "hf_" + "a" * 34, "--api-key ", "wandb login ",
    "docker login x -p ", '"auth": "', "\\\"", "\n", "\r", "\r\n", " ", "\t", "\x1b[31m", "\x00", "é", "\ud800",
])
_TEXT = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=40)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_fuzz_bytes_never_raise_anything_but_a_user_error(data: bytes) -> None:
    try:
        paste = decode_input(data, 2048)
    except UserInputError:
        return
    paste.text.encode("utf-8")
    distill(paste)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_fuzz_text_entry_keeps_line_breaks_and_distillation_never_raises(text: str) -> None:
    try:
        paste = decode_input(text, MAX)
    except (EmptyInput, BinaryInput):
        return
    source = paste.text  # after surrogate repair; redaction must keep every line break of it
    unredacted = text.replace("\ud800", "\ufffd")
    if unredacted.startswith("\ufeff"):
        unredacted = unredacted[1:]
    assert source.count("\n") == unredacted.count("\n")
    assert source.count("\r") == unredacted.count("\r")
    d = distill(paste)
    n_lines = source.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1
    assert d.total_lines == n_lines
    assert all(1 <= line.line_no <= n_lines for line in (*d.evidence, *d.cleaned))


def _calls(fn, arg) -> int:
    """Python and C function calls made by fn(arg): a machine-independent measure of work."""
    count = 0

    def hook(frame, event, _arg):  # noqa: ANN001
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(hook)
    try:
        fn(arg)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("unit", [corpus_paste(), "INFO 12-01 10:00:00 [x.py:1] token=abc ok\n" * 50,
                                  "-----BEGIN PRIVATE KEY-----\n" + ("A" * 64 + "\n") * 40])
def test_entry_and_distillation_work_grows_linearly(unit: str) -> None:
    def entry_and_distill(text: str) -> None:
        distill(decode_input(text, 10**9))

    small, large = _calls(entry_and_distill, unit * 4), _calls(entry_and_distill, unit * 32)
    assert large <= 8 * small * 1.25 + 2000, (small, large)  # 8x the input: at most ~8x the calls
