"""Webhook rows as the SQL adapters store them, and back (shared by SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from sink.webhooks.model import Attempt, DeliveryState, Due, Webhook

# A delivery's rows for the deliveries listing: the attempts made, and (attempt 1, no
# status) the deliveries not tried yet. Parameters: webhook_id twice; the caller adds the
# position condition and the order. {P} is the adapter's placeholder for the nth parameter.
LISTING = """
SELECT * FROM (
    SELECT d.delivery_id, d.event_id, d.type, a.attempt, a.state, a.status_code, a.error,
           a.at, a.next_attempt_at, d.run_id, a.at AS k1, d.seq AS k2, a.attempt AS k3
    FROM webhook_attempts a JOIN webhook_deliveries d ON d.seq = a.delivery_seq
    WHERE a.webhook_id = {P1}
    UNION ALL
    SELECT d.delivery_id, d.event_id, d.type, 1, d.state, NULL, NULL, d.created_at,
           CASE WHEN d.state = 'pending' THEN d.next_attempt_at END, d.run_id,
           d.created_at, d.seq, 0
    FROM webhook_deliveries d WHERE d.webhook_id = {P2} AND d.attempts = 0
) rows
"""


def webhook_values(w: Webhook) -> tuple[Any, ...]:
    return (
        w.webhook_id,
        w.url,
        ",".join(w.events),
        w.run_id,
        w.run_glob,
        w.description,
        w.secret,
        w.created_at,
        w.disabled_at,
        w.created_by_admin,
    )


WEBHOOK_COLUMNS = (
    "webhook_id, url, events, run_id, run_glob, description, secret, created_at, disabled_at, "
    "created_by_admin"
)


def webhook_from(row: Any) -> Webhook:
    return Webhook(
        webhook_id=row["webhook_id"],
        url=row["url"],
        events=tuple(e for e in str(row["events"]).split(",") if e),
        run_id=row["run_id"],
        run_glob=row["run_glob"],
        description=row["description"],
        secret=row["secret"],
        created_at=float(row["created_at"]),
        disabled_at=None if row["disabled_at"] is None else float(row["disabled_at"]),
        created_by_admin=bool(row["created_by_admin"]),
    )


def attempt_from(row: Any) -> Attempt:
    return Attempt(
        delivery_id=row["delivery_id"],
        event_id=row["event_id"],
        type=row["type"],
        attempt=int(row["attempt"]),
        state=DeliveryState(row["state"]),
        status_code=row["status_code"],
        error=row["error"],
        at=float(row["at"]),
        next_attempt_at=None if row["next_attempt_at"] is None else float(row["next_attempt_at"]),
        run_id=row["run_id"],
        position=(float(row["k1"]), int(row["k2"]), int(row["k3"])),
    )


def due_from(row: Any, lease_until: float) -> Due:
    return Due(
        delivery_id=row["delivery_id"],
        webhook_id=row["webhook_id"],
        url=row["url"],
        secret=row["secret"],
        event_id=row["event_id"],
        type=row["type"],
        run_id=row["run_id"],
        body=row["body"],
        attempt=int(row["attempts"]) + 1,
        lease_until=lease_until,
    )
