"""Slack bot latency: the 3-second ack budget under a burst, and paste → first answer.

    .venv/bin/python bench/bench_slack.py [--commands 50] [--pastes 20] [--json]

Real bot (HTTP mode, waitress, real engine with the bundled KB and all-MiniLM-L6-v2, KB-only answers),
real HTTP both ways; Slack's side is the test suite's fake Web API (tests/slack/fake_slack.py) in the same
process, so its timestamps share the benchmark's clock. Targets (issue 4): 50 concurrent slash commands
→ ack p99 < 300 ms, all answered, none lost; paste → first answer p50 < 500 ms.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "slack")]

from fake_slack import FakeSlack  # noqa: E402
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG  # noqa: E402
from slack_support import SlackSender, bot_settings  # noqa: E402

from bot.pipeline import Pipeline  # noqa: E402
from bot.settings import Settings  # noqa: E402
from bot.slack.server import SlackBot  # noqa: E402

logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # queue-depth warnings are the point of a burst


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def final_update_for(fake: FakeSlack, channel: str) -> float | None:
    """When the answer (the chat.update with the verdict) for `channel` arrived at Slack."""
    for call in fake.calls_to("chat.update"):
        if call.params.get("channel") == channel and KV_CACHE_CASE in json.dumps(call.params.get("blocks")):
            return call.at
    return None


def bench_commands(fake: FakeSlack, sender: SlackSender, n: int) -> dict[str, float]:
    channels = [f"CB{i:07d}" for i in range(n)]

    def one(channel: str) -> tuple[str, float, int, float]:
        sent = sender.command("/vllm-explain", slack_escape(KV_CACHE_LOG), response_url=fake.response_url(channel),
                              channel=channel, user="U0BENCH01")
        return channel, sent.elapsed_s, sent.status, time.monotonic() - sent.elapsed_s

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(one, channels))
    acks = [r[1] * 1000 for r in results]
    statuses = {r[2] for r in results}
    deadline = time.monotonic() + 120
    answered: dict[str, float] = {}
    while len(answered) < n and time.monotonic() < deadline:
        for channel, _, _, sent_at in results:
            if channel not in answered and (at := final_update_for(fake, channel)) is not None:
                answered[channel] = (at - sent_at) * 1000
        time.sleep(0.05)
    return {
        "commands": n,
        "http_statuses": sorted(statuses),
        "ack_p50_ms": round(percentile(acks, 50), 1),
        "ack_p99_ms": round(percentile(acks, 99), 1),
        "ack_max_ms": round(max(acks), 1),
        "answered": len(answered),
        "lost": n - len(answered),
        "answer_p50_ms": round(percentile(list(answered.values()), 50), 1) if answered else None,
        "answer_max_ms": round(max(answered.values()), 1) if answered else None,
        "burst_total_s": round(time.monotonic() - started, 2),
    }


def bench_pastes(fake: FakeSlack, sender: SlackSender, n: int) -> dict[str, float]:
    firsts: list[float] = []
    placeholders: list[float] = []
    for i in range(n):
        ts = f"1800000000.{i:06d}"
        event = {"type": "message", "channel": "D0BENCH01", "channel_type": "im", "user": "U0BENCH01",
                 "text": slack_escape(KV_CACHE_LOG), "ts": ts, "event_ts": ts}
        sent_at = time.monotonic()
        sender.event(event, f"EvBENCH{i:05d}")
        calls = fake.wait_for(lambda cs, ts=ts: _first_answer(cs, ts) is not None, timeout=30)
        placeholder_at, answer_at = _first_answer(calls, ts)  # type: ignore[misc]
        placeholders.append((placeholder_at - sent_at) * 1000)
        firsts.append((answer_at - sent_at) * 1000)
    return {
        "pastes": n,
        "placeholder_p50_ms": round(percentile(placeholders, 50), 1),
        "first_answer_p50_ms": round(percentile(firsts, 50), 1),
        "first_answer_p90_ms": round(percentile(firsts, 90), 1),
        "first_answer_max_ms": round(max(firsts), 1),
    }


def _first_answer(calls: list, ts: str) -> tuple[float, float] | None:
    placeholder = next((c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                        and c.params.get("_ts")), None)
    if placeholder is None:
        return None
    update = next((c for c in calls if c.method == "chat.update" and c.params.get("ts") == placeholder.params["_ts"]), None)
    return (placeholder.at, update.at) if update else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=50)
    parser.add_argument("--pastes", type=int, default=20)
    parser.add_argument("--index-dir", default=None, help="reuse a built index (default: a temp dir, built once)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    index_dir = args.index_dir or tempfile.mkdtemp(prefix="bench-slack-index-")
    base = Settings(index_dir=Path(index_dir), kb_db_path=Path(tempfile.mkdtemp(prefix="bench-slack-kb-")) / "kb.sqlite3")
    print("loading the engine (KB, index, MiniLM)…", file=sys.stderr)
    doctor = Pipeline.from_settings(base)
    doctor.match(KV_CACHE_LOG)  # warm: index built/loaded, model loaded, first encode done

    fake = FakeSlack().start()
    bot = SlackBot(bot_settings(fake, base), doctor, http=True).start()
    sender = SlackSender(bot.url + "/slack/events")
    try:
        sender.event({"type": "message", "channel": "D0WARM01", "channel_type": "im", "user": "U0BENCH01",
                      "text": slack_escape(KV_CACHE_LOG), "ts": "1.1", "event_ts": "1.1"}, "EvWARM")
        bot.deps.workers.wait_idle(30)
        fake.clear()
        pastes = bench_pastes(fake, sender, args.pastes)
        fake.clear()
        commands = bench_commands(fake, sender, args.commands)
    finally:
        bot.stop(drain_s=60)
        fake.stop()

    report = {"machine": f"{os.cpu_count()} CPUs", "workers": bot.settings.slack_workers, **pastes, **commands}
    ok = (commands["ack_p99_ms"] < 300 and commands["lost"] == 0 and commands["http_statuses"] == [200]
          and pastes["first_answer_p50_ms"] < 500)
    report["targets_met"] = ok
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>22}: {value}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
