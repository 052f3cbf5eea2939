"""Group diagnoses spread over replicas (issue 11): every replica runs one FleetWorker that takes host
jobs from the shared queue (bot/runner/fleet.py), checks them, stores each host's result, and, when it
stored the last one, posts the summary and closes the audit row. The asking replica only posts the
placeholder, enqueues, and edits the placeholder with "k of N hosts checked" while it waits.

Stop (SIGTERM): no new jobs are claimed; jobs whose checks are still running after the grace period are
handed back to the queue, so another replica takes them at once instead of after the lease.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import DoctorError
from bot.models import FleetReport, HostReport, HostRequest
from bot.ops import metrics
from bot.runner.fleet import FleetQueue, FleetRun, Job
from bot.slack.reply import hosts as host_blocks
from bot.slack.thread_facts import ThreadHostFacts
from bot.storage import StorageError

log = logging.getLogger(__name__)

POLL_S = 0.5
SWEEP_EVERY_S = 5.0
ORPHAN_AGE_S = 3600.0  # far above the gap between opening an audit row and enqueueing its hosts


class FleetWorker:
    def __init__(self, queue: FleetQueue, deps: Any, client: Any, owner: str, *,
                 check_hosts: Callable[..., list[HostReport]] | None = None) -> None:
        self.queue, self.deps, self.client, self.owner = queue, deps, client, owner
        self.settings = deps.settings
        self.lease_s = float(self.settings.fleet_lease_s)
        self.batch = max(1, int(self.settings.runner_max_parallel_hosts))
        self._check_hosts = check_hosts
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._held: set[int] = set()
        self._held_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="fleet-worker", daemon=True)
        self._last_sweep = 0.0

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> FleetWorker:
        self._thread.start()
        return self

    def poke(self) -> None:
        """New jobs were enqueued here: look now instead of at the next poll."""
        self._wake.set()

    def stop(self, grace_s: float) -> int:
        """Stop claiming; wait up to `grace_s` for running checks; hand back what is left. Returns how many
        jobs were handed back."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout=grace_s)
        with self._held_lock:
            left = sorted(self._held)
        try:
            return self.queue.release(self.owner, left)
        except StorageError as exc:
            log.warning("could not hand back %d fleet jobs (they return after the lease): %s", len(left), exc)
            return 0

    # --- the loop -------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                jobs = self.queue.claim(self.owner, self.batch, self.lease_s)
                if jobs:
                    self._work(jobs)
                    continue
                if time.monotonic() - self._last_sweep > SWEEP_EVERY_S:
                    self._last_sweep = time.monotonic()
                    metrics.FLEET_QUEUE_DEPTH.set(self.queue.depth())
                    for run_id in self.queue.summaries_due():
                        self._summarize(run_id)
                    self._close_orphaned_audit_runs()
            except StorageError as exc:
                log.warning("fleet queue unavailable: %s", exc)
                self._stopping.wait(5)
            except Exception:  # noqa: BLE001 - the worker must outlive a bad job; logged with its trace
                log.exception("fleet worker iteration failed")
                self._stopping.wait(1)
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _work(self, jobs: list[Job]) -> None:
        with self._held_lock:
            self._held.update(j.id for j in jobs)
        renewing = threading.Event()
        renewer = threading.Thread(target=self._renew, args=([j.id for j in jobs], renewing), daemon=True)
        renewer.start()
        try:
            by_run: dict[int, list[Job]] = {}
            for job in jobs:
                by_run.setdefault(job.run_id, []).append(job)
            for run_id, run_jobs in by_run.items():
                for job, report in zip(run_jobs, self._check(run_jobs), strict=True):
                    if not self.queue.complete(job.id, self.owner, report):
                        log.warning("host %s of fleet run %s was taken over by another replica; result dropped",
                                    job.host, run_id)
                    with self._held_lock:
                        self._held.discard(job.id)
                self._summarize(run_id)
        finally:
            renewing.set()
            renewer.join(timeout=5)
            with self._held_lock:
                self._held.difference_update(j.id for j in jobs)

    def _renew(self, job_ids: list[int], done: threading.Event) -> None:
        while not done.wait(self.lease_s / 3):
            with self._held_lock:
                still = [i for i in job_ids if i in self._held]
            try:
                self.queue.renew(self.owner, still, self.lease_s)
            except StorageError as exc:
                log.warning("could not renew fleet leases: %s", exc)

    def _check(self, jobs: list[Job]) -> list[HostReport]:
        pipeline = self.deps.hosts.pipeline
        spec = jobs[0].spec
        request = HostRequest(jobs[0].host, tuple(spec.get("checks") or ()), int(spec.get("max_tier", 0)))
        hosts, reports = [], {}
        for job in jobs:
            try:
                hosts.extend(pipeline.resolve_hosts(job.host))
            except DoctorError as exc:  # removed from the inventory since the run was asked for
                reports[job.host] = HostReport(host=job.host, error=str(exc), error_kind=type(exc).__name__)
        if hosts:
            run = self._check_hosts or pipeline.check_hosts
            try:
                for report in run(hosts, request):
                    reports[report.host] = report
            except DoctorError as exc:
                for host in hosts:
                    reports[host.name] = HostReport(host=host.name, error=str(exc), error_kind=type(exc).__name__)
        return [reports.get(j.host) or HostReport(host=j.host, error="not checked", error_kind="RunnerError")
                for j in jobs]

    def _close_orphaned_audit_runs(self) -> None:
        """Slack runs left `running` by a replica that died before enqueueing (or a bot from before the
        queue): closed as `interrupted` once older than ORPHAN_AGE_S and not part of an open fleet run."""
        closed = self.deps.hosts.audit().close_interrupted(
            "slack", time.time() - ORPHAN_AGE_S, keep=self.queue.open_audit_runs())
        if closed:
            log.warning("closed %d audit run(s) left running by a stopped replica as interrupted", closed)

    # --- the summary, once ----------------------------------------------------------------------------------
    def _summarize(self, run_id: int) -> None:
        run = self.queue.take_summary(run_id, self.owner)
        if run is None:
            return
        try:
            self._post_summary(run)
        except Exception:  # noqa: BLE001 - the audit row must still be closed
            ref = secrets.token_hex(4)
            log.exception("posting the summary of fleet run %s failed (ref %s)", run_id, ref)
        finally:
            report = self._report(run)
            if run.audit_run_id is not None:
                try:
                    self.deps.hosts.audit().finish(int(run.audit_run_id), report)
                except Exception:  # noqa: BLE001 - logged; the run itself is complete
                    log.exception("could not close audit run %s", run.audit_run_id)
            self.queue.finished(run_id, self.owner)

    @staticmethod
    def _report(run: FleetRun) -> FleetReport:
        spec = run.spec
        return FleetReport(target=run.target, hosts=run.hosts, max_tier=int(spec.get("max_tier", 0)),
                               checks_requested=spec.get("checks"), started_at=run.created,
                               duration_s=time.time() - run.created)

    def _post_summary(self, run: FleetRun) -> None:
        spec, report = run.spec, self._report(run)
        titles = self.deps.hosts.pipeline.case_titles(report.case_ids())
        from bot.slack.attachments import fleet_extras

        notes, pictures = fleet_extras(report, self.deps.settings)
        message = host_blocks.host_report(report, kb_titles=titles, asker=spec.get("asker"), fleet_notes=notes)
        channel, ts, thread_ts = spec["channel"], spec.get("ts"), spec.get("thread_ts")
        if ts:
            self.client.chat_update(channel=channel, ts=ts, **message.as_kwargs())
        else:
            kwargs: dict[str, Any] = {"channel": channel, **message.as_kwargs()}
            if thread_ts:
                kwargs["thread_ts"] = thread_ts
            ts = self.client.chat_postMessage(**kwargs)["ts"]
        thread_ts = thread_ts or ts
        if (facts := ThreadHostFacts.from_report(channel, thread_ts, report)) is not None:
            self.deps.thread_facts.remember(facts)
        try:
            self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=f"diagnose-{run.target}.txt",
                                        title=f"Raw check outputs: {run.target}", content=report.raw_text())
        except SlackApiError as exc:
            log.warning("raw output upload failed: %s", exc.response.get("error"))
        for filename, png, title in pictures:
            try:
                self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=filename, title=title,
                                            file=png)
            except SlackApiError as exc:
                log.warning("picture upload failed: %s", exc.response.get("error"))
