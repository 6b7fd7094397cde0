"""Prometheus metrics, on a registry of the server's own (no process-global state).

Label values are bounded: operations, outcomes, reasons, policy names and route
templates; never run ids, inbox ids or addresses.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sink.inbox import Inbox
from sink.vocabulary import State

_POLL_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
_EVIDENCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages = Counter(
            "runsink_messages", "SMTP deliveries by outcome", ["outcome"], registry=r
        )
        # Each outcome's child, kept once made: ``labels`` checks and joins the label
        # values under a lock at every call, and ingest counts every message.
        self._messages_by_outcome: dict[str, Counter] = {}
        self.inboxes_created = Counter(
            "runsink_inboxes_created", "Inboxes created", ["policy"], registry=r
        )
        self.polls_per_inbox = Histogram(
            "runsink_polls_per_inbox",
            "Polls an inbox had spent when it first got evidence or expired",
            buckets=_POLL_BUCKETS,
            registry=r,
        )
        self.time_to_evidence = Histogram(
            "runsink_time_to_first_evidence_seconds",
            "From inbox creation to the first wait that returned evidence",
            buckets=_EVIDENCE_BUCKETS,
            registry=r,
        )
        self.polls = Counter(
            "runsink_polls", "Waits that reached the store", ["outcome"], registry=r
        )
        self.blocked_calls = Counter(
            "runsink_blocked_calls",
            "Calls refused before the store",
            ["operation", "reason"],
            registry=r,
        )
        self.provider_failures = Counter(
            "runsink_provider_failures",
            "Provider trouble by operation",
            ["operation", "reason"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "runsink_breaker_transitions",
            "Circuit breaker transitions by operation and cause",
            ["operation", "event", "cause"],
            registry=r,
        )
        self.claims = Counter("runsink_claims", "Claims by result", ["result"], registry=r)
        self.expiries = Counter(
            "runsink_inboxes_expired", "Inboxes expired", ["reason"], registry=r
        )
        self.long_polls = Gauge("runsink_active_long_polls", "Waits in progress", registry=r)
        self.webhook_deliveries = Counter(
            "runsink_webhook_deliveries",
            "Webhook delivery attempts by result (delivered, retried, failed, disabled)",
            ["result"],
            registry=r,
        )
        self.webhook_pending = Gauge(
            "runsink_webhook_pending", "Webhook deliveries waiting for an attempt", registry=r
        )
        self.sweeps = Counter(
            "runsink_sweeps", "Rounds of the expiry / retention sweeper", registry=r
        )
        self.smtp_connections = Gauge(
            "runsink_smtp_connections", "Open SMTP connections", registry=r
        )
        self.http_connections = Gauge(
            "runsink_http_connections", "Open HTTP connections (within the cap)", registry=r
        )
        self.refusals = Counter(
            "runsink_connection_refusals",
            "Connections refused or closed by a limit, by listener and reason",
            ["listener", "reason"],
            registry=r,
        )
        self.http_latency = Histogram(
            "runsink_http_request_duration_seconds",
            "HTTP latency by route template and status class",
            ["route", "method", "status"],
            buckets=_HTTP_BUCKETS,
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def message(self, outcome: str, count: int = 1) -> None:
        child = self._messages_by_outcome.get(outcome)
        if child is None:  # made on first use: an outcome shows once it has happened
            child = self._messages_by_outcome[outcome] = self.messages.labels(outcome)
        child.inc(count)

    def inbox_created(self, policy: str) -> None:
        self.inboxes_created.labels(policy).inc()

    def polled(self, before: Inbox, after: Inbox, found: bool) -> None:
        self.polls.labels("received" if found else after.reason or "evidence_not_found").inc()
        first_evidence = found and before.state is not State.RECEIVED and before.evidence is None
        if found and first_evidence and after.last_poll_at is not None:
            latency = (
                after.last_poll_at + (after.last_poll_latency_ms or 0) / 1000
            ) - before.created_at
            self.time_to_evidence.observe(max(0.0, latency))
        if found or after.state is State.EXPIRED:
            self.polls_per_inbox.observe(after.polls_used)

    def blocked(self, operation: str, reason: str) -> None:
        self.blocked_calls.labels(operation, reason).inc()

    def provider_failure(self, operation: str, reason: str) -> None:
        self.provider_failures.labels(operation, reason).inc()

    def breaker(self, operation: str, event: str, cause: str | None) -> None:
        self.breaker_transitions.labels(operation, event, cause or "none").inc()

    def claim(self, result: str) -> None:
        self.claims.labels(result).inc()

    def expired(self, reason: str) -> None:
        self.expiries.labels(reason).inc()

    def refused(self, listener: str, reason: str) -> None:
        self.refusals.labels(listener, reason).inc()

    def http(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_latency.labels(route, method, f"{status // 100}xx").observe(seconds)
