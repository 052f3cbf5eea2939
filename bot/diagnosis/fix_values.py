"""A case's fix commands fitted to this deployment (issue 25, item 3).

Case YAML writes its commands with named placeholders (kb.schema.PLACEHOLDERS): `vllm serve {model}
--tensor-parallel-size {tp} --max-model-len {max_model_len_fit}`. `fit_values` reads the values from the
facts the log states (bot/diagnosis/facts.py LogFacts) and, for the `_fit` names, computes them from the numbers the
log reports, keeping the arithmetic (an i18n key and its numbers) and the lines it came from, so the edge can
show "21440 = the longest context the log says the KV cache holds (L57)". `fill` writes the command; a
placeholder with no value shows as `<name>`, never as a guessed number. Pure functions over typed values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from bot.models import FilledValue, FixValues, LogFacts
from bot.present.i18n import Language, t
from kb.schema import PLACEHOLDER_RE, Case

# placeholder → the LogFacts field it is, as the log states it
_STATED: dict[str, str] = {
    "model": "model",
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "port": "port",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "vllm_version": "vllm_version",
}
MAX_UTILIZATION = 0.95  # above this a computed gpu_memory_utilization leaves nothing for CUDA graphs, NCCL …
HEADROOM = 0.01  # added to a computed gpu_memory_utilization: vLLM's own profiling moves by about this much

Params = tuple[tuple[str, str], ...]


def _lines(facts: LogFacts, *names: str) -> tuple[int, ...]:
    return tuple(sorted({facts.sources[n] for n in names if n in facts.sources}))


def _num(value: float) -> str:
    return f"{value:g}"


def _max_model_len_fit(facts: LogFacts) -> FilledValue | None:
    """The largest context the KV cache the log reports holds: the estimate vLLM prints, else its token
    count, else blocks × block size."""
    if facts.estimated_max_model_len and facts.estimated_max_model_len > 0:
        n = facts.estimated_max_model_len
        return FilledValue("max_model_len_fit", str(n), "fit.max_model_len.estimated", (("value", str(n)),),
                           _lines(facts, "estimated_max_model_len"))
    if facts.kv_cache_tokens and facts.kv_cache_tokens > 0:
        n = facts.kv_cache_tokens
        return FilledValue("max_model_len_fit", str(n), "fit.max_model_len.tokens", (("value", str(n)),),
                           _lines(facts, "kv_cache_tokens"))
    if facts.gpu_blocks and facts.gpu_blocks > 0 and facts.block_size:
        n = facts.gpu_blocks * facts.block_size
        return FilledValue("max_model_len_fit", str(n), "fit.max_model_len.blocks",
                           (("value", str(n)), ("blocks", str(facts.gpu_blocks)), ("block", str(facts.block_size))),
                           _lines(facts, "gpu_blocks", "block_size"))
    return None


def _kv_needed(facts: LogFacts) -> tuple[float, tuple[int, ...]] | None:
    """GiB of KV cache one max_model_len request needs: as the log states it (V1), else scaled from the
    available KV memory by max_model_len / the estimated maximum."""
    if facts.kv_cache_needed_gib and facts.kv_cache_needed_gib > 0:
        return facts.kv_cache_needed_gib, _lines(facts, "kv_cache_needed_gib")
    if facts.kv_cache_gib and facts.max_model_len and facts.estimated_max_model_len:
        need = facts.kv_cache_gib * facts.max_model_len / facts.estimated_max_model_len
        return need, _lines(facts, "kv_cache_gib", "max_model_len", "estimated_max_model_len")
    return None


def _round_up(value: float) -> float:
    return math.ceil(round(value * 100, 6)) / 100


def _utilization_fit(facts: LogFacts) -> tuple[FilledValue | None, tuple[str, Params] | None]:
    """The gpu_memory_utilization that holds the weights, the activation peak, non-torch memory and the KV
    cache one max_model_len request needs, plus HEADROOM; (None, note) when that is over MAX_UTILIZATION."""
    total = facts.total_gpu_memory_gib
    needed = _kv_needed(facts)
    if not total or total <= 0 or needed is None:
        return None, None
    need, need_lines = needed
    parts = [(facts.weights_gib, "weights_gib"), (facts.activation_peak_gib, "activation_peak_gib"),
             (facts.non_torch_gib, "non_torch_gib")]
    if all(v is not None for v, _ in parts[:2]):
        used = sum(v or 0.0 for v, _ in parts)
        share = _round_up((used + need) / total) + HEADROOM
        params: Params = (("weights", _num(facts.weights_gib or 0)),
                          ("activation", _num(facts.activation_peak_gib or 0)),
                          ("non_torch", _num(facts.non_torch_gib or 0)), ("need", f"{need:.2f}"),
                          ("total", _num(total)))
        key = "fit.gpu_memory_utilization.parts"
        lines = tuple(sorted({*_lines(facts, "total_gpu_memory_gib", *(n for _, n in parts)), *need_lines}))
    elif facts.gpu_memory_utilization and facts.kv_cache_gib is not None:
        share = _round_up(facts.gpu_memory_utilization + (need - facts.kv_cache_gib) / total) + HEADROOM
        params = (("current", _num(facts.gpu_memory_utilization)), ("need", f"{need:.2f}"),
                  ("available", _num(facts.kv_cache_gib)), ("total", _num(total)))
        key = "fit.gpu_memory_utilization.delta"
        lines = tuple(sorted({*_lines(facts, "total_gpu_memory_gib", "gpu_memory_utilization", "kv_cache_gib"),
                              *need_lines}))
    else:
        return None, None
    share = round(share, 2)
    if share > MAX_UTILIZATION:
        return None, ("fit.note.utilization_too_high", (("value", f"{share:.2f}"), ("max", _num(MAX_UTILIZATION))))
    return FilledValue("gpu_memory_utilization_fit", f"{share:.2f}", key, (("value", f"{share:.2f}"), *params),
                       lines), None


def _tp_fit(facts: LogFacts, gpus: int | None, gpus_line: tuple[int, ...]) -> FilledValue | None:
    """The largest tensor-parallel size ≤ the GPUs there are that divides the attention heads."""
    heads = facts.num_attention_heads
    if not gpus or gpus <= 0:
        return None
    if heads:
        size = max(t for t in range(1, gpus + 1) if heads % t == 0)
        return FilledValue("tp_fit", str(size), "fit.tp.heads",
                           (("value", str(size)), ("gpus", str(gpus)), ("heads", str(heads))),
                           tuple(sorted({*gpus_line, *_lines(facts, "num_attention_heads")})))
    return FilledValue("tp_fit", str(gpus), "fit.tp.gpus", (("value", str(gpus)),), gpus_line)


def _conflict_notes(facts: LogFacts) -> list[tuple[str, Params]]:
    notes: list[tuple[str, Params]] = []
    for name, others in facts.conflicts.items():
        used = facts.known().get(name)
        if used is None or not others:
            continue
        said = ", ".join(f"{value} (L{line})" for value, line in others)
        notes.append(("fit.note.conflict", (("name", name), ("used", str(used)),
                                            ("line", str(facts.sources.get(name, "?"))), ("others", said))))
    return notes


def fit_values(facts: LogFacts | None, host_gpus: int | None = None) -> FixValues:
    """The placeholders this log fills. host_gpus: the GPUs a /vllm-diagnose run in the same thread counted
    (used for {tp_fit} when the log does not say how many GPUs are visible)."""
    if facts is None:
        return FixValues()
    values: dict[str, FilledValue] = {}
    for placeholder, name in _STATED.items():
        value = getattr(facts, name)
        if value is not None and value != "":
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            values[placeholder] = FilledValue(placeholder, shown, lines=_lines(facts, name))
    model = facts.model or ""
    if model.startswith(("/", "./", "~/", "../")):
        values["model_dir"] = FilledValue("model_dir", model.rstrip("/"), lines=_lines(facts, "model"))
    notes = _conflict_notes(facts)
    fitted = _max_model_len_fit(facts)
    if fitted is not None:
        values[fitted.name] = fitted
    share, note = _utilization_fit(facts)
    if share is not None:
        values[share.name] = share
    if note is not None:
        notes.append(note)
    gpus, gpus_line = (facts.gpu_count, _lines(facts, "gpu_count")) if facts.gpu_count else (host_gpus, ())
    tp = _tp_fit(facts, gpus, gpus_line)
    if tp is not None:
        values[tp.name] = tp
    return FixValues(values, tuple(notes))


def fill(command: str, values: FixValues | None) -> str:
    """The command with each {placeholder} replaced by its value, or by `<placeholder>` when unknown."""
    known = values.values if values is not None else {}

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        filled = known.get(name)
        return filled.value if filled is not None else f"<{name}>"

    return PLACEHOLDER_RE.sub(one, command)


def used_values(command: str | None, values: FixValues | None) -> list[FilledValue]:
    """The computed values (those with arithmetic) a command uses, in order: what the edge explains."""
    if not command or values is None:
        return []
    names = dict.fromkeys(PLACEHOLDER_RE.findall(command))
    return [values.values[n] for n in names if n in values.values and values.values[n].reason]


def fitted_case(case: Case, values: FixValues | None) -> Case:
    """The case with its fix commands filled (what the LLM prompt and the KB-only answer quote)."""
    if not any(step.command and PLACEHOLDER_RE.search(step.command) for step in case.fix):
        return case
    steps = [step.model_copy(update={"command": fill(step.command, values)}) if step.command else step
             for step in case.fix]
    return case.model_copy(update={"fix": steps})


def value_line(value: FilledValue, lang: Language = "en") -> str:
    """'21440 = the longest context the log says the KV cache holds (L57)'."""
    where = f" ({', '.join(f'L{n}' for n in value.lines)})" if value.lines else ""
    return t(value.reason, lang, **dict(value.params)) + where if value.reason else f"{value.value}{where}"


def note_lines(values: FixValues | None, lang: Language = "en") -> list[str]:
    """The notes on the values (two model ids, a share that does not fit), worded."""
    return [t(key, lang, **dict(params)) for key, params in values.notes] if values is not None else []


def step_lines(command: str | None, values: FixValues | None, lang: Language = "en") -> list[str]:
    """The arithmetic of the computed values a command uses, one line each; a note when one stays unfilled."""
    out = [value_line(v, lang) for v in used_values(command, values)]
    if command and "<" in fill(command, values) and PLACEHOLDER_RE.search(command):
        missing = [n for n in PLACEHOLDER_RE.findall(command) if values is None or n not in values.values]
        if missing:
            out.append(t("fit.unfilled", lang))
    return out


def to_json(values: FixValues | None) -> dict[str, Mapping[str, object]]:
    """{name: {"value", "how", "lines"}} for --json."""
    if values is None:
        return {}
    return {n: {"value": v.value, "how": value_line(v) if v.reason else "", "lines": list(v.lines)}
            for n, v in values.values.items()}


__all__ = ["fill", "fit_values", "fitted_case", "note_lines", "step_lines", "to_json", "used_values", "value_line"]
