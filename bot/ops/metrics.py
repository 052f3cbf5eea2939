"""Prometheus metrics (the only prometheus_client import). Module-level collectors in the default
registry; `exposition()` renders them for GET /metrics. Names are prefixed `vllm_doctor_`.

    requests_total{kind}                       Slack deliveries: event, command, duplicate, block_actions, …
    ack_seconds                                time from request to HTTP response on /slack/events
    verdicts_total{verdict}                    match / uncertain / unknown of explained pastes
    llm_calls_total{outcome}                   ok / fallback / cached / skipped (breaker open)
    llm_breaker_open                           1 while the circuit is open or half-open
    runner_checks_total{verdict}, runner_check_seconds
    fleet_queue_depth                          host jobs not yet done (all replicas, from the database)
    index_build_seconds                        last search index build or update
    claims_total{outcome}                      Slack deliveries admitted: new, retaken (a dead or stopping replica's
                                               lease), offline (database down), duplicate, busy (retry refused)
    database_errors_total{operation}           failed database calls on the delivery path: claim, finish,
                                               release, heartbeat, priors
    handed_back_total                          unanswered deliveries released at shutdown for another replica
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

REQUESTS = Counter("vllm_doctor_requests_total", "Slack deliveries by kind", ["kind"])
ACK_SECONDS = Histogram("vllm_doctor_ack_seconds", "Request to response on /slack/events",
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5))
VERDICTS = Counter("vllm_doctor_verdicts_total", "Diagnosis verdicts of explained logs", ["verdict"])
LLM_CALLS = Counter("vllm_doctor_llm_calls_total", "LLM explanations by outcome", ["outcome"])
LLM_BREAKER_OPEN = Gauge("vllm_doctor_llm_breaker_open", "1 while the LLM circuit is open or half-open")
RUNNER_CHECKS = Counter("vllm_doctor_runner_checks_total", "Host checks by verdict", ["verdict"])
RUNNER_CHECK_SECONDS = Histogram("vllm_doctor_runner_check_seconds", "Duration of one host check",
                                 buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
FLEET_QUEUE_DEPTH = Gauge("vllm_doctor_fleet_queue_depth", "Host jobs of group diagnoses not yet done")
INDEX_BUILD_SECONDS = Gauge("vllm_doctor_index_build_seconds", "Duration of the last index build or update")

CLAIMS = Counter("vllm_doctor_claims_total", "Slack deliveries by claim outcome", ["outcome"])
DATABASE_ERRORS = Counter("vllm_doctor_database_errors_total", "Failed database calls on the delivery path",
                          ["operation"])
HANDED_BACK = Counter("vllm_doctor_handed_back_total", "Unanswered deliveries released at shutdown")

CONTENT_TYPE = CONTENT_TYPE_LATEST


def exposition() -> bytes:
    return generate_latest()
