"""`vllm-doctor serve [--http] [--port N]`. Imports are lazy: `vllm-doctor --help` must not load
slack_bolt or torch."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve Slack's HTTP requests on POST /slack/events (needs SLACK_SIGNING_SECRET) instead of "
        "Socket Mode (default, needs SLACK_APP_TOKEN)",
    )
    parser.add_argument(
        "--port", type=int, default=None, metavar="N", help="HTTP port (default: VLLM_DOCTOR_HTTP_PORT or 3000); "
        "GET /health is served in both modes"
    )
    parser.add_argument("--host", default=None, help="bind address (default: VLLM_DOCTOR_HTTP_HOST or 0.0.0.0)")


def run(args: argparse.Namespace, settings: Any) -> int:
    from bot.ops.logs import configure_logging
    from bot.pipeline import Pipeline
    from bot.slack.server import SlackBot

    configure_logging(settings.log_format)
    print("loading the knowledge base and the embedding model…", file=sys.stderr)
    doctor = Pipeline.from_settings(settings)
    # The bot warms the pipeline up in the background (index + one query embedding; ONNX path ~1 s): /healthz
    # answers at once, /readyz says 503 "index: loading" until a paste can be answered at warm speed.
    bot = SlackBot(settings, doctor, http=args.http, host=args.host, port=args.port)

    def _terminate(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt  # PID 1 in a container gets no default SIGTERM handler; stop() drains below

    signal.signal(signal.SIGTERM, _terminate)
    bot.start()
    mode = f"HTTP on {bot.url}/slack/events" if args.http else "Socket Mode"
    print(f"vllm-doctor is up: {mode}; health on {bot.url}/health", file=sys.stderr)
    try:
        bot.wait()
    except KeyboardInterrupt:
        print("stopping…", file=sys.stderr)
    finally:
        handed_back = bot.stop()
    if handed_back:  # answers still running were handed to other replicas: they must not go on here
        print(f"handed {handed_back} unanswered deliveries back; exiting", file=sys.stderr)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)
    return 0
