"""How many connections the process can hold: the descriptor budget, sized once at start-up.

Every SMTP connection, HTTP connection and long-poll holds one file descriptor. When the
process runs out (``EMFILE``), the kernel keeps completing handshakes into the listen
backlog while asyncio stops accepting for a second at a time: clients connect and hear
nothing, ``/healthz`` times out and SMTP stops greeting. So the caps are sized to fit
under ``RLIMIT_NOFILE`` with room to spare, and a client past a cap is answered (SMTP 421,
HTTP 503 with ``Retry-After``) instead of starving everyone.

``plan`` is pure (the limit is a parameter); ``raise_fd_limit`` is the one call to the OS.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

RESERVED_MIN = 64
"""Descriptors kept for everything that is not a client: stdio, the event loop's epoll and
self-pipe, the two listening sockets, SQLite's files (database, WAL, shared memory, for the
writer and the reader), certificates read at start-up, and connections being refused (a
refused connection is accepted, answered and closed: it holds a descriptor briefly)."""
_MIN_CAP = 8


@dataclass(frozen=True, slots=True)
class Capacity:
    fd_limit: int
    """The soft RLIMIT_NOFILE the caps were sized for."""
    smtp_connections: int
    http_connections: int
    long_polls: int
    """Waits holding their connection open; the rest of the HTTP cap stays for short requests
    (``/healthz``, reads, claims), so long-polls can never take every connection."""
    streams: int
    """Live-event streams (also counted as long-polls: they hold a connection as a wait
    does): a share of the long-poll cap, so a flood of streams leaves room for waits."""
    reserved: int
    lowered: bool
    """True when the configured caps did not fit and were scaled down."""


def reserve_for(fd_limit: int) -> int:
    return max(RESERVED_MIN, fd_limit // 16)


def needed(smtp_connections: int, http_connections: int) -> int:
    """The descriptor limit under which both caps fit as configured."""
    total = smtp_connections + http_connections
    limit = total + RESERVED_MIN
    while limit - reserve_for(limit) < total:
        limit = total + reserve_for(limit) + 1
    return limit


def plan(fd_limit: int, smtp_connections: int, http_connections: int) -> Capacity:
    """The caps that fit under ``fd_limit``: as configured when they fit, else scaled down
    in proportion (never below a handful each)."""
    reserved = reserve_for(fd_limit)
    budget = fd_limit - reserved
    if budget < 2 * _MIN_CAP:
        raise ValueError(
            f"the descriptor limit {fd_limit} leaves no room for connections "
            f"({reserved} are reserved); raise `ulimit -n`"
        )
    smtp, http = smtp_connections, http_connections
    lowered = smtp + http > budget
    if lowered:
        smtp = max(_MIN_CAP, smtp * budget // (smtp_connections + http_connections))
        http = max(_MIN_CAP, budget - smtp)
    long_polls = max(1, http - max(4, http // 8))
    return Capacity(
        fd_limit=fd_limit,
        smtp_connections=smtp,
        http_connections=http,
        long_polls=long_polls,
        streams=max(1, long_polls // 8),
        reserved=reserved,
        lowered=lowered,
    )


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE toward ``wanted`` (never past the hard limit, never
    lower than it is); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
            soft = ceiling
        except (ValueError, OSError):  # e.g. macOS caps below an "infinite" hard limit
            pass
    return soft if soft != resource.RLIM_INFINITY else wanted
