"""``Sink``: the synchronous HTTP client, on httpx."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TypeVar

import httpx

from sink.client import wire
from sink.client.base import Clock, SystemClock
from sink.client.errors import TransportFailed
from sink.client.inbox import Inbox
from sink.client.models import (
    DeliveryPage,
    Envelope,
    FoundPage,
    MatchLike,
    Message,
    MessagePage,
    RunReport,
    RunToken,
    Webhook,
)

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8025"
DEFAULT_TIMEOUT = httpx.Timeout(10.0)


def client_headers(api_token: str | None) -> dict[str, str]:
    headers = {"User-Agent": "runsink-python"}
    if api_token:
        headers["Authorization"] = f"Bearer {api_token}"
    return headers


class Sink:
    """A runsink server over HTTP. ``with Sink(url) as sink: inbox = sink.create_inbox(...)``.

    Every method is one call of the contract's HTTP API; envelope answers come back as
    ``Envelope`` (whatever their state), error answers are raised (``ApiError`` and kin).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_token: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._http = httpx.Client(
            base_url=self.url,
            headers=client_headers(api_token),
            timeout=self._timeout,
            transport=transport,
        )
        self._clock = clock or SystemClock()

    @property
    def clock(self) -> Clock:
        return self._clock

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Sink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Sink {self.url}>"

    def _send(self, call: wire.Call[T]) -> T:
        try:
            response = self._http.request(
                call.method,
                call.path,
                json=call.json,
                params=call.params or None,
                headers=call.headers or None,
                timeout=call.timeout(self._timeout),
            )
        except httpx.TransportError as exc:
            raise TransportFailed(
                f"{call.method} {self.url}{call.path}: {type(exc).__name__}: {exc}"
            ) from exc
        return call.read(response)

    # -- the contract's operations -----------------------------------------------------

    def create_inbox(
        self,
        run_id: str,
        purpose: str,
        *,
        ttl_s: int | None = None,
        poll_budget: int | None = None,
        policy: str | None = None,
        match: MatchLike | None = None,
        idempotency_key: str | None = None,
    ) -> Inbox:
        """Lease an inbox to ``run_id`` for ``purpose`` (a replay returns the live one)."""
        created = self._send(
            wire.create_inbox(
                run_id,
                purpose,
                ttl_s=ttl_s,
                poll_budget=poll_budget,
                policy=policy,
                match=match,
                idempotency_key=idempotency_key,
            )
        )
        return Inbox(self, created.envelope, replayed=created.replayed, capped=created.capped)

    def open_inbox(self, inbox_id: str) -> Inbox:
        """A handle on an existing inbox (its envelope as of now)."""
        return Inbox(self, self.get_inbox(inbox_id))

    def get_inbox(self, inbox_id: str) -> Envelope:
        return self._send(wire.get_inbox(inbox_id))

    def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float | None = None,
        cursor: str | None = None,
        match: MatchLike | None = None,
        run_id: str | None = None,
        order: str | None = None,
    ) -> Envelope:
        """One wait: long-polls up to ``timeout_s`` (capped by the server; omitted, the policy's
        ``long_poll_max_s``, as the tool's default); spends one poll."""
        return self._send(
            wire.wait_for_message(
                inbox_id,
                timeout_s=timeout_s,
                cursor=cursor,
                match=match,
                run_id=run_id,
                order=order,
            )
        )

    def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage:
        return self._send(wire.list_messages(inbox_id, after=after, limit=limit, run_id=run_id))

    def read_message(self, message_id: str, *, run_id: str | None = None) -> Message:
        return self._send(wire.read_message(message_id, run_id=run_id))

    def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes:
        return self._send(wire.raw_message(message_id, run_id=run_id))

    def claim_message(self, message_id: str, run_id: str) -> Envelope:
        return self._send(wire.claim_message(message_id, run_id))

    def run_report(self, run_id: str) -> RunReport:
        return self._send(wire.run_report(run_id))

    def get_run_report(self, run_id: str) -> RunReport:
        """The run report, under the MCP tool's name (every tool has its method)."""
        return self.run_report(run_id)

    def find_mail(
        self,
        query: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> FoundPage:
        """Search the mail this client may see, newest first (the MCP tool ``find_mail``)."""
        return self._send(wire.find_mail(query, run_id=run_id, limit=limit, cursor=cursor))

    def mint_run_token(self, run_id: str, *, ttl_s: int | None = None) -> RunToken:
        """A token limited to ``run_id`` until its last lease ends (or ``ttl_s``, if sooner).

        Hand it to an agent (``Sink(url, api_token=token.token)``, or ``runsink mcp
        --api-token``): it reaches this run's inboxes and mail, and nothing else.
        """
        return self._send(wire.mint_run_token(run_id, ttl_s=ttl_s))

    def release_run(self, run_id: str) -> None:
        """Release the run's evidence now: live inboxes expire, bodies are deleted."""
        self._send(wire.release_run(run_id))

    # -- webhooks: a run's live events POSTed to a receiver, signed (verify_webhook) ---------

    def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        run_id: str | None = None,
        run_glob: str | None = None,
        description: str | None = None,
    ) -> Webhook:
        """POST ``url`` the live events (``message``, ``inbox``, ``run_event``; default all) of
        ``run_id``, of the runs ``run_glob`` matches, or of every run. The answer's ``secret``
        (shown only here) is what the receiver passes to ``verify_webhook``."""
        return self._send(
            wire.create_webhook(
                url, events=events, run_id=run_id, run_glob=run_glob, description=description
            )
        )

    def list_webhooks(self) -> tuple[Webhook, ...]:
        """The webhooks this token may see (secrets never shown)."""
        return self._send(wire.list_webhooks())

    def get_webhook(self, webhook_id: str) -> Webhook:
        return self._send(wire.get_webhook(webhook_id))

    def delete_webhook(self, webhook_id: str) -> None:
        """Stop the webhook: nothing more is sent to it."""
        self._send(wire.delete_webhook(webhook_id))

    def list_deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> DeliveryPage:
        """The webhook's delivery attempts, newest first (``next_cursor`` for older ones)."""
        return self._send(wire.list_deliveries(webhook_id, cursor=cursor, limit=limit))

    def test_webhook(self, webhook_id: str) -> str:
        """Send the webhook a ``ping`` event now; returns the delivery's id."""
        return self._send(wire.test_webhook(webhook_id))
