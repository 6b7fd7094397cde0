"""Search latency at 10k and 100k stored messages: p50 and p95 per query, through the real store.

The mail is made the way ingest makes it (``SQLiteStore.save_message`` with an ``Incoming``:
parsed summary, group commit, the index's text made on the writer thread), into a fresh
SQLite file: 30 % evidence for 200 inboxes of 40 runs, 70 % caught mail, a varied
vocabulary, one in ten with an attachment. Then each query runs ``--repeats`` times as
``GET /v1/messages?query=`` runs it (``Mailbox.search``, limit 50), and the figures are printed.

    .venv/bin/python bench/search.py              # 10k and 100k, about 8 minutes
    .venv/bin/python bench/search.py --quick      # 2,000 messages, a smoke run
    .venv/bin/python bench/search.py --postgres   # the same on PostgreSQL (its own server)

``--postgres`` starts a PostgreSQL of its own (``tests/pg_cluster.py``) and measures the
PostgreSQL store's search (``sink/storage/postgres/mail.py``); the first search indexes
everything stored (as a search after a burst of ingest would), and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink import ids
from sink.inbox import Inbox
from sink.mailbox import Mailbox, MailStore
from sink.message import summarize
from sink.search import parse_query
from sink.storage.base import Delivered, Event, Incoming, NewInbox, Store
from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.store import SQLiteStore
from tests.pg_cluster import Cluster  # the same server the test suite starts

WORDS = [
    "account",
    "alpha",
    "billing",
    "confirm",
    "delivery",
    "email",
    "invoice",
    "launch",
    "magic",
    "order",
    "password",
    "payment",
    "receipt",
    "reset",
    "security",
    "shipping",
    "signup",
    "staging",
    "support",
    "ticket",
    "update",
    "verify",
    "welcome",
    "weekly",
    "report",
    "newsletter",
    "invitation",
    "reminder",
    "schedule",
    "meeting",
    "project",
    "release",
]
DOMAINS = ["gmail.com", "yahoo.example", "acme.example", "corp.example", "sink.test"]
QUERIES = [
    "password",  # a common word: newest matches first, stops at the limit
    '"reset your password"',  # a phrase
    "subject:invoice",
    "from:acme",
    "to:gmail.com",
    "zzqx-never-there",  # no match at all
    "is:caught",
    "is:unclaimed",
    "has:attachment",
    "larger:2k",
    "larger:50M",  # no match: the listing is walked to its end (metadata, not bodies)
    "password is:claimed",  # a common word, a rare filter: the index walks its matches
    "welcome -newsletter",
    "run:run-7 confirm",
    "after:2020-01-01 before:2100-01-01 billing",
    "",  # the plain listing, newest first
]


def _message(rng: random.Random, n: int, to: str) -> bytes:
    words = rng.sample(WORDS, 4)
    message = EmailMessage()
    name = rng.choice(["Acme", "Billing Team", "Support", "Newsletter"])
    message["From"] = f"{name} <noreply@{rng.choice(DOMAINS)}>"
    message["To"] = to
    message["Subject"] = f"{words[0].title()} {words[1]} #{n}"
    vocabulary = rng.sample(WORDS, 8)  # each message talks about a few things, not all
    body = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(40, 400)))
    if n % 7 == 0:
        body += "\nPlease reset your password with the code 482913."
    message.set_content(body)
    if n % 10 == 0:
        message.add_attachment(b"%PDF-1.4 " * 100, maintype="application", subtype="pdf")
    return message.as_bytes()


async def _inboxes(store: Store, now: float) -> list[Inbox]:
    made = []
    for n in range(200):
        inbox = Inbox.fresh(
            inbox_id=ids.new_inbox_id(),
            run_id=f"run-{n % 40}",
            purpose=f"p{n}",
            address=f"{ids.new_local_part()}@sink.test",
            policy_name="ci",
            now=now,
            ttl_s=86400,
            poll_budget=12,
            trace_id=ids.new_trace_id(),
        )
        new = NewInbox(inbox, inbox.address.split("@")[0], f"k{n}", "{}", 1000, 86400)
        await store.create_inbox(new, Event(inbox.run_id, "created", now, inbox.inbox_id))
        made.append(inbox)
    return made


async def _fill(store: Store, inboxes: list[Inbox], start: int, count: int) -> None:
    rng = random.Random(start)
    pending = []
    for n in range(start, start + count):
        now = time.time()
        if rng.random() < 0.3:
            inbox = rng.choice(inboxes)
            to = inbox.address
            raw = _message(rng, n, to)
            delivered = (Delivered(inbox.inbox_id, inbox.run_id, ids.new_message_id(), (to,)),)
            incoming = Incoming(raw, summarize(raw), "app@example.test", now, delivered)
        else:
            to = f"user{rng.randint(1, 5000)}@{rng.choice(DOMAINS)}"
            raw = _message(rng, n, to)
            incoming = Incoming(
                raw,
                summarize(raw),
                "app@example.test",
                now,
                (),
                unrouted=(to,),
                caught_id=ids.new_caught_id(),
                caught_until=now + 86400,
            )
        pending.append(store.save_message(incoming))
        if len(pending) == 256:  # one group commit's worth, as concurrent SMTP clients make
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)


# The peer: what a sink without a text index does (Mailpit's search is LIKE '%term%'): a scan
# of every body, newest first, for the queries that are one plain word or phrase.
PEER_SQL = (
    "SELECT message_pk FROM messages WHERE subject LIKE ? OR CAST(raw AS TEXT) LIKE ? "
    "ORDER BY message_pk DESC LIMIT 50"
)


def _percentiles(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return round(statistics.median(times), 2), round(times[int(0.95 * (len(times) - 1))], 2)


async def _measure(store: Store, mailbox: Mailbox, repeats: int) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for query in QUERIES:
        times = []
        found = 0
        for _ in range(repeats):
            began = time.perf_counter()
            page = await mailbox.search(query, None, None, 50)
            times.append((time.perf_counter() - began) * 1000)
            found = len(page.items)
        p50, p95 = _percentiles(times)
        row = {"p50_ms": p50, "p95_ms": p95, "results": found}
        word = query.strip('"')
        if (
            isinstance(store, SQLiteStore)
            and query
            and ":" not in query
            and " -" not in query
            and word.replace(" ", "").replace("-", "").isalnum()
        ):
            peer = []
            for _ in range(max(3, repeats // 5)):
                began = time.perf_counter()
                await store._read(PEER_SQL, (f"%{word}%", f"%{word}%"))
                peer.append((time.perf_counter() - began) * 1000)
            row["peer_p95_ms"] = _percentiles(peer)[1]
        figures[query or "(listing)"] = row
    return figures


async def main(
    sizes: list[int], repeats: int, dsn: str | None = None
) -> dict[int, dict[str, dict[str, float]]]:
    report: dict[int, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        store: SQLiteStore | PostgresStore = (
            SQLiteStore(Path(folder) / "bench.db") if dsn is None else PostgresStore(dsn)
        )
        await store.open()
        mail: MailStore = store.mail
        try:
            inboxes = await _inboxes(store, time.time())
            stored = 0
            for size in sizes:
                began = time.perf_counter()
                await _fill(store, inboxes, stored, size - stored)
                took = time.perf_counter() - began
                print(f"stored {size - stored} messages in {took:.1f} s", file=sys.stderr)
                began = time.perf_counter()
                await mail.count(parse_query("alpha"), None, 1)  # the index catches up
                took = time.perf_counter() - began
                print(f"the index caught up in {took:.1f} s", file=sys.stderr)
                stored = size
                report[size] = await _measure(store, Mailbox(mail), repeats)
        finally:
            await store.close()
    _print_table(report, repeats)
    return report


def _print_table(report: dict[int, dict[str, dict[str, float]]], repeats: int) -> None:
    sizes = list(report)
    print(
        f"`GET /v1/messages?query=` as the server runs it (limit 50), {repeats} runs per query; "
        f"load average {os.getloadavg()[0]:.2f}. Peer: a LIKE scan of every body (what a sink "
        "without a text index does), for the plain-word queries."
    )
    print()
    head = " | ".join(f"{s:,} p50 / p95 ms | peer {s:,} p95 ms" for s in sizes)
    print(f"| query | {head} |")
    print("|---|" + "---|---|" * len(sizes))
    for query in report[sizes[0]]:
        cells = []
        for size in sizes:
            row = report[size][query]
            peer = row.get("peer_p95_ms")
            cells.append(f"{row['p50_ms']:.1f} / {row['p95_ms']:.1f}")
            cells.append("-" if peer is None else f"{peer:.1f}")
        print(f"| `{query}` | {' | '.join(cells)} |")
    print()
    worst = ", ".join(
        f"{s:,}: {max(f['p95_ms'] for f in report[s].values()):.1f} ms" for s in sizes
    )
    print(f"worst p95 over all queries: {worst} (target: under 50 ms at 100,000)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="2,000 messages, 10 runs each")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--postgres", action="store_true", help="a PostgreSQL store instead")
    args = parser.parse_args()
    sizes = "2000" if args.quick else args.sizes
    cluster = Cluster.create() if args.postgres else None
    try:
        dsn = None
        if cluster is not None:
            cluster.start()
            dsn = cluster.dsn(cluster.new_database())
        figures = asyncio.run(
            main([int(s) for s in sizes.split(",")], 10 if args.quick else args.repeats, dsn)
        )
    finally:
        if cluster is not None:
            cluster.destroy()
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
