"""Retrain ranker (App Home button, KB reviewers only): `vllm-doctor train --with-feedback` on a worker; the
reviewer is told the result by DM. The running bot uses the new artifact from its next KB change or restart
(with VLLM_DOCTOR_RANKER=learned)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import UserInputError
from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import user_of
from bot.slack.reply import kb_growth as kbb
from bot.slack.reply.mrkdwn import escape_limited

log = logging.getLogger(__name__)
_RUNNING = threading.Lock()  # one training at a time per process


def retrain_ranker(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_retrain(ack: Any, body: dict[str, Any], client: Any) -> None:
        ack()
        user_id, _ = user_of(body)
        if not growth.reviewers.is_reviewer(user_id):
            log.info("refused a Retrain click by %s", user_id)
            _tell(client, user_id, "Only KB reviewers can retrain the ranker.", ":lock:")
            return
        deps.workers.submit(_retrain, deps, client, user_id)

    return on_retrain


def _retrain(deps: SlackDeps, client: Any, user_id: str) -> None:
    from bot.evaluation.ranker_train import retrain  # scikit-learn: only when a reviewer asks

    if not _RUNNING.acquire(blocking=False):
        _tell(client, user_id, "The ranker is being retrained already; you will hear when it is done.",
              ":hourglass_flowing_sand:")
        return
    try:
        summary = retrain(deps.pipeline)
    except UserInputError as exc:
        _tell(client, user_id, f"The ranker was not retrained: {escape_limited(str(exc), 1500)[0]}")
        return
    except Exception:
        log.exception("retraining the ranker failed")
        _tell(client, user_id, "Sorry, retraining failed on my side; the ranker is unchanged.", ":rotating_light:")
        return
    finally:
        _RUNNING.release()
    _tell(client, user_id, escape_limited(summary, 1500)[0], ":white_check_mark:")


def _tell(client: Any, user_id: str, text: str, emoji: str = ":warning:") -> None:
    message = kbb.ephemeral(text, emoji)
    try:
        client.chat_postMessage(channel=user_id, **message.as_kwargs())
    except SlackApiError as exc:
        log.warning("could not tell %s about the retraining: %s", user_id, exc.response.get("error"))
