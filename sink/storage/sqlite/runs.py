"""The run index on SQLite (``RunIndex``): read-only views across runs for the web UI."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sink.inbox import Delivery
from sink.storage.base import RunSummary
from sink.storage.rows import delivery_from_row, run_summary_from_row
from sink.storage.sqlite.writer import Row

Read = Callable[[str, Sequence[Any]], Awaitable[list[Row]]]

DELIVERY_SELECT = """
SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at, m.size,
       d.claim_id, d.claim_run_id, d.claimed_at
FROM deliveries d JOIN messages m ON m.message_pk = d.message_pk
"""


class SQLiteRuns:
    def __init__(self, read: Read) -> None:
        self._read = read  # the store's reader connection

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        where: list[str] = []
        params: list[Any] = []
        if run_contains:
            where.append("instr(lower(run_id), lower(?)) > 0")
            params.append(run_contains)
        if purpose:
            where.append("run_id IN (SELECT run_id FROM inboxes WHERE purpose = ?)")
            params.append(purpose)
        having = ""
        if before is not None:
            having = "HAVING started < ? OR (started = ? AND run_id < ?)"
            params.extend([before[0], before[0], before[1]])
        rows = await self._read(
            f"""WITH page AS (
                    SELECT run_id, MIN(created_at) AS started FROM inboxes
                    {"WHERE " + " AND ".join(where) if where else ""}
                    GROUP BY run_id {having}
                    ORDER BY started DESC, run_id DESC LIMIT ?)
                SELECT p.run_id, p.started,
                    (SELECT group_concat(purpose, ' ') FROM (SELECT DISTINCT purpose
                        FROM inboxes WHERE run_id = p.run_id)) AS purposes,
                    (SELECT json_group_object(st, n) FROM (
                        SELECT CASE WHEN state != 'expired' AND expires_at <= ? THEN 'expired'
                               ELSE state END AS st, COUNT(*) AS n
                        FROM inboxes WHERE run_id = p.run_id GROUP BY st)) AS states,
                    (SELECT COUNT(*) FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS messages,
                    (SELECT COUNT(d.claim_id) FROM deliveries d
                        JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS claims,
                    e.type AS last_event, e.at AS last_event_at
                FROM page p
                LEFT JOIN events e ON e.id = (SELECT id FROM events WHERE run_id = p.run_id
                                              ORDER BY at DESC, id DESC LIMIT 1)
                ORDER BY p.started DESC, p.run_id DESC""",
            (*params, limit, now),
        )
        return [run_summary_from_row(r) for r in rows]

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        rows = await self._read(
            DELIVERY_SELECT + " WHERE d.inbox_id IN (SELECT inbox_id FROM inboxes WHERE "
            "run_id = ?) ORDER BY d.seq DESC LIMIT ?",
            (run_id, limit),
        )
        return [delivery_from_row(row) for row in rows]
