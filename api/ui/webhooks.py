"""A run's webhook deliveries, for its page: every attempt at one of the run's events.

The port lists attempts per webhook (newest first); a run's page wants them across the
webhooks whose filter reaches the run, newest first. Each such webhook's newest ``limit``
attempts are read and those of the run kept, so a webhook busy with other runs may show
fewer of this run's than it made (the API's ``/v1/webhooks/{id}/deliveries`` has them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from sink.webhook_calls import shown_url
from sink.webhooks.model import Attempt, Webhook
from sink.webhooks.port import WebhookStore


@dataclass(frozen=True, slots=True)
class RunAttempt:
    webhook: Webhook
    attempt: Attempt

    @property
    def url(self) -> str:
        """The receiver's URL as the page shows it: without its password."""
        return shown_url(self.webhook.url)


async def run_attempts(store: WebhookStore, run_id: str, limit: int) -> list[RunAttempt]:
    """The newest attempts (at most ``limit``) at the run's events, across its webhooks."""
    found: list[RunAttempt] = []
    for hook in await store.webhooks():
        if not _reaches(hook, run_id):
            continue
        for attempt in await store.deliveries(hook.webhook_id, None, limit):
            if attempt.run_id == run_id:
                found.append(RunAttempt(hook, attempt))
    found.sort(key=lambda row: row.attempt.position, reverse=True)
    return found[:limit]


def _reaches(hook: Webhook, run_id: str) -> bool:
    """Whether the webhook's run filter takes this run (its event types aside)."""
    if hook.run_id is not None and hook.run_id != run_id:
        return False
    return hook.run_glob is None or fnmatchcase(run_id, hook.run_glob)
