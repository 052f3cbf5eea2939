"""Readiness and drain of one bot (issue 28), in process over real HTTP: /readyz is 503 until the search
index and the embedding model are loaded (not at the first paste); stop() turns /readyz 503 while the
listener still takes requests, then closes it, then hands back what is left; a delivery that only
replied in its listener is marked done, not handed back."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Any

from fake_slack import FakeSlack


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class SlowStart:
    """The real engine, whose warm-up waits for the test."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.release = threading.Event()

    def warm_up(self) -> None:
        assert self.release.wait(60)
        self._inner.warm_up()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_ready_only_once_the_index_is_loaded(make_http_bot: Any, doctor: Any) -> None:
    engine = SlowStart(doctor)
    bot, _ = make_http_bot(engine)
    status, body = _get(bot.url + "/readyz")
    assert status == 503 and "index: loading" in body
    engine.release.set()
    for _ in range(600):
        status, body = _get(bot.url + "/readyz")
        if status == 200:
            break
        threading.Event().wait(0.1)
    assert status == 200 and "index: loaded" in body
    assert _get(bot.url + "/healthz")[0] == 200


def test_drain_says_503_before_it_stops_listening(make_http_bot: Any, fake_slack: FakeSlack) -> None:
    bot, sender = make_http_bot(drain_delay_s=30.0)
    for _ in range(600):
        if _get(bot.url + "/readyz")[0] == 200:
            break
        threading.Event().wait(0.1)
    dm = {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": "U0ALICE1", "text": "hi there",
          "ts": "1700009000.000001", "event_ts": "1700009000.000001"}
    assert sender.event(dm, "EvDRAIN1").status == 200
    fake_slack.wait_for_call("chat.postEphemeral")
    stopper = threading.Thread(target=bot.stop, kwargs={"drain_s": 5.0, "delay_s": 30.0})
    stopper.start()
    for _ in range(600):
        status, body = _get(bot.url + "/readyz")
        if status == 503:
            break
        threading.Event().wait(0.05)
    assert status == 503 and "serving: draining" in body
    dm2 = dict(dm, ts="1700009000.000002", event_ts="1700009000.000002")
    assert sender.event(dm2, "EvDRAIN2").status == 200  # still taking requests while draining
    fake_slack.wait_for_call("chat.postEphemeral", count=2)
    for _ in range(600):  # the listener returns just after its reply
        if not bot.deps.seen_events.working():
            break
        threading.Event().wait(0.05)
    assert bot.deps.seen_events.working() == []  # both answered in their listener: done, nothing to hand back
    bot.end_drain_delay()
    stopper.join(120)
    assert not stopper.is_alive()
    try:
        status = sender.event(dict(dm, ts="1700009000.000003"), "EvDRAIN3").status
    except OSError:
        status = 0  # the listener is closed: Slack gets no ack and delivers the event to another replica
    assert status != 200
