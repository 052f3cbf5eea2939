"""A running vLLM server seen over HTTP (scripts/http_get.py prints the response as one JSON object):
/health, /v1/models, and the Prometheus /metrics text."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from bot.runner.parsers.base import Facts, Output, ParseError, load_json, parser


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _parse_labels(text: str, start: int) -> tuple[dict[str, str], int]:
    """Labels from `{a="x",b="y\\"z"}` starting at text[start] == '{'; returns (labels, index after '}')."""
    labels: dict[str, str] = {}
    i = start + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i < n and text[i] == "}":
            return labels, i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            raise ValueError("label without a quoted value")
        key = text[i:eq].strip()
        i = eq + 2
        value = []
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                value.append({"n": "\n", '"': '"', "\\": "\\"}.get(text[i + 1], text[i + 1]))
                i += 2
                continue
            value.append(text[i])
            i += 1
        labels[key] = "".join(value)
        i += 1
    raise ValueError("unterminated label set")


def parse_prometheus(text: str) -> list[Sample]:
    """Prometheus text exposition format 0.0.4 → samples. Bad lines are skipped, not fatal: one odd
    metric from a newer vLLM must not hide the rest."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        try:
            if 0 <= brace < (space if space >= 0 else len(line)):
                name = line[:brace]
                labels, end = _parse_labels(line, brace)
                rest = line[end:].split()
            else:
                name, *rest = line.split()
                labels = {}
            value = float(rest[0])  # accepts NaN, +Inf, -Inf
        except (ValueError, IndexError):
            continue
        samples.append(Sample(name, labels, value))
    return samples


def _http(out: Output) -> dict[str, Any]:
    data = load_json(out)
    if "status" not in data and "error" not in data:
        raise ParseError("http probe JSON has neither status nor error")
    return data


@parser("http_status", ["url", "status", "error", "elapsed_ms", "reachable", "body_start"])
def http_status(out: Output) -> Facts:
    data = _http(out)
    return {
        "url": data.get("url"),
        "status": data.get("status"),
        "error": data.get("error"),
        "elapsed_ms": data.get("elapsed_ms"),
        "reachable": data.get("status") is not None,
        "body_start": (data.get("body") or "")[:200] or None,
    }


@parser("openai_models", ["url", "status", "error", "reachable", "models", "model_count", "max_model_len"])
def openai_models(out: Output) -> Facts:
    data = _http(out)
    facts: Facts = {"url": data.get("url"), "status": data.get("status"), "error": data.get("error"),
                    "reachable": data.get("status") is not None}
    if data.get("status") != 200:
        return facts
    try:
        listing = json.loads(data.get("body") or "")
        models = [m["id"] for m in listing["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"/v1/models did not return an OpenAI model list: {exc}") from exc
    lens = [m.get("max_model_len") for m in listing["data"] if m.get("max_model_len")]
    return {**facts, "models": models, "model_count": len(models), "max_model_len": lens[0] if lens else None}


# Metric names changed across vLLM versions; first name found wins.
_KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # both a 0–1 fraction
_PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")


def _values(samples: list[Sample], names: tuple[str, ...]) -> list[float]:
    for name in names:
        found = [s.value for s in samples if s.name == name and not math.isnan(s.value)]
        if found:
            return found
    return []


@parser(
    "prometheus",
    ["url", "status", "error", "reachable", "series", "kv_cache_usage", "waiting", "running", "preemptions",
     "engines", "served_models"],
)
def prometheus(out: Output) -> Facts:
    data = _http(out)
    facts: Facts = {"url": data.get("url"), "status": data.get("status"), "error": data.get("error"),
                    "reachable": data.get("status") is not None}
    if data.get("status") != 200:
        return facts
    samples = [s for s in parse_prometheus(data.get("body") or "") if s.name.startswith("vllm:")]
    if not samples:
        raise ParseError("no vllm: metrics in /metrics (is this a vLLM server?)")
    kv = _values(samples, _KV_USAGE)
    waiting = _values(samples, ("vllm:num_requests_waiting",))
    running = _values(samples, ("vllm:num_requests_running",))
    preempt = _values(samples, _PREEMPTIONS)
    return {
        **facts,
        "series": len(samples),
        "kv_cache_usage": max(kv) if kv else None,  # worst engine
        "waiting": int(sum(waiting)) if waiting else None,
        "running": int(sum(running)) if running else None,
        "preemptions": int(sum(preempt)) if preempt else None,
        "engines": sorted({s.labels.get("engine", "0") for s in samples}),
        "served_models": sorted({s.labels["model_name"] for s in samples if "model_name" in s.labels}),
    }
