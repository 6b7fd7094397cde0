"""The run index on PostgreSQL (``RunIndex``): read-only views across runs for the web UI."""

from __future__ import annotations

from typing import Any

from sink.inbox import Delivery
from sink.storage.base import RunSummary
from sink.storage.postgres.driver import Database
from sink.storage.rows import delivery_from_row, run_summary_from_row

_DELIVERY_SELECT = """
SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at, m.size,
       d.claim_id, d.claim_run_id, d.claimed_at
FROM deliveries d JOIN messages m ON m.message_key = d.message_key
"""


class PostgresRuns:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        params: list[Any] = [now, limit]
        where: list[str] = []
        if run_contains:
            params.append(run_contains)
            where.append(f"strpos(lower(run_id), lower(${len(params)})) > 0")
        if purpose:
            params.append(purpose)
            where.append(f"run_id IN (SELECT run_id FROM inboxes WHERE purpose = ${len(params)})")
        having = ""
        if before is not None:
            params.extend(before)
            b, r = len(params) - 1, len(params)
            having = f"HAVING MIN(created_at) < ${b} OR (MIN(created_at) = ${b} AND run_id < ${r})"
        rows = await self._db.fetch(
            "recent_runs",
            f"""WITH page AS (
                    SELECT run_id, MIN(created_at) AS started FROM inboxes
                    {"WHERE " + " AND ".join(where) if where else ""}
                    GROUP BY run_id {having}
                    ORDER BY started DESC, run_id DESC LIMIT $2)
                SELECT p.run_id, p.started,
                    (SELECT string_agg(DISTINCT purpose, ' ') FROM inboxes
                        WHERE run_id = p.run_id) AS purposes,
                    (SELECT json_object_agg(st, n) FROM (
                        SELECT CASE WHEN state <> 'expired' AND expires_at <= $1 THEN 'expired'
                               ELSE state END AS st, COUNT(*) AS n
                        FROM inboxes WHERE run_id = p.run_id GROUP BY 1) s) AS states,
                    (SELECT COUNT(*) FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS messages,
                    (SELECT COUNT(d.claim_id) FROM deliveries d
                        JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS claims,
                    e.type AS last_event, e.at AS last_event_at
                FROM page p
                LEFT JOIN LATERAL (SELECT type, at FROM events WHERE run_id = p.run_id
                                   ORDER BY at DESC, id DESC LIMIT 1) e ON true
                ORDER BY p.started DESC, p.run_id DESC""",
            *params,
        )
        return [run_summary_from_row(r) for r in rows]

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        rows = await self._db.fetch(
            "run_deliveries",
            _DELIVERY_SELECT + " WHERE d.inbox_id IN (SELECT inbox_id FROM inboxes WHERE "
            "run_id = $1) ORDER BY m.received_at DESC, d.seq DESC LIMIT $2",
            run_id,
            limit,
        )
        return [delivery_from_row(row) for row in rows]
