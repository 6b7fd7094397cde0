"""The SMTP side in one readable flow: route each recipient, check its lease, store, wake.

``route`` runs at RCPT; ``deliver`` runs when DATA ends. Neither knows SMTP reply
codes: they answer with a verdict that ``sink/smtp/handler.py`` turns into one. ``fault``
says which injected fault, if any, hits an SMTP step.
"""

from __future__ import annotations

import ipaddress
import re
import string
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sink import ids
from sink.address import ascii_and_beyond
from sink.clock import Clock, SystemClock
from sink.config import Settings
from sink.events import Hub
from sink.faults import Fault, FaultRegistry
from sink.logs import log
from sink.message import summarize
from sink.metrics import Metrics
from sink.storage.base import Delivered, Incoming, Late, Route, Store
from sink.waiters import Waiters

# RFC 5321 4.1.2, strictly: a dot-atom or quoted-string local part, and a domain of
# LDH labels or an address literal. Nothing is "repaired" into a different mailbox.
# SMTPUTF8 (RFC 6531 3.3) adds UTF-8 to atext, qtext and labels, and nothing else: no
# spaces or controls of any script (checked apart, by Unicode category).
# Each class below: its ASCII characters and UTF8-non-ascii (no lone surrogates).
_LETTERS_DIGITS = string.ascii_letters + string.digits
_ATEXT = ascii_and_beyond(_LETTERS_DIGITS + "!#$%&'*+/=?^_`{|}~-", surrogates=False)
_QTEXT = ascii_and_beyond(
    "".join(map(chr, [0x20, 0x21, *range(0x23, 0x5C), *range(0x5D, 0x7F)])), surrogates=False
)
_LOCAL = rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|\"(?:{_QTEXT}|\\[\x20-\x7e])*\")"
_LDH = ascii_and_beyond(_LETTERS_DIGITS, surrogates=False)
_LABEL = rf"{_LDH}(?:(?:{_LDH}|-){{0,61}}{_LDH})?"
_DOMAIN = rf"(?:(?:{_LABEL}\.)*{_LABEL}|\[[\x21-\x5a\x5e-\x7e]+\])"
_ADDRESS = re.compile(rf"({_LOCAL})@({_DOMAIN})")
_DOT_ATOM = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*")
_QUOTED_PAIR = re.compile(r"\\(.)")


def _unquoted(local: str) -> str:
    """``"abc"`` is the local part ``abc`` (RFC 5322 3.4.1: the quoting is not part of the
    mailbox) when what it quotes is a plain dot-atom; anything else stays as it is."""
    if len(local) >= 2 and local[0] == local[-1] == '"':
        inner = _QUOTED_PAIR.sub(r"\1", local[1:-1])
        if _DOT_ATOM.fullmatch(inner):
            return inner
    return local


class Verdict(StrEnum):
    ACCEPT = "accept"  # routed to a live inbox
    CAUGHT = "caught"  # another domain, or ours with no such inbox: caught mail (never relayed)
    UNKNOWN = "unknown"  # the same, refused (--reject-unknown-recipients)
    LATE_DROP = "late_drop"  # the inbox is expired; accepted and dropped
    LATE_REJECT = "late_reject"  # the inbox is expired and its policy says reject
    BAD_ADDRESS = "bad_address"
    TOO_BIG = "too_big"  # the declared SIZE is over the inbox's policy


@dataclass(frozen=True, slots=True)
class Recipient:
    address: str
    verdict: Verdict
    route: Route | None = None


class DataVerdict(StrEnum):
    STORED = "stored"
    TOO_BIG = "too_big"
    ALL_LATE_REJECTED = "all_late_rejected"


class Ingest:
    def __init__(
        self,
        store: Store,
        waiters: Waiters,
        settings: Settings,
        metrics: Metrics,
        clock: Clock | None = None,
        new_ids: ids.Ids = ids.RANDOM,
        events: Hub | None = None,
        faults: FaultRegistry | None = None,
    ) -> None:
        self._store = store
        self._faults = faults  # None: faults are not enabled (no --enable-faults)
        # Where stored and caught mail is announced: None when the backend's own feed
        # announces every commit, mail included (``Backend.feed_announces_commits``).
        self._events = events
        self._waiters = waiters
        self._settings = settings
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._ids = new_ids

    def check_sender(self, address: str) -> bool:
        """A reverse-path is empty (bounces) or a strict address."""
        return address == "" or _valid_address(address)

    async def route(self, address: str, declared_size: int | None) -> Recipient:
        if not _valid_address(address):
            return Recipient(address, Verdict.BAD_ADDRESS)
        local, _, domain = address.rpartition("@")
        local = _unquoted(local)
        route = None
        if self._settings.is_our_domain(domain):
            base = local.lower().split("+", 1)[0]
            route = await self._store.route(base) if base else None
        if route is None:
            if self._settings.reject_unknown_recipients:
                return Recipient(address, Verdict.UNKNOWN)
            return Recipient(address, Verdict.CAUGHT)
        policy = self._settings.policy(route.policy_name)
        if route.expired or self._clock.now() >= route.expires_at:
            late = Verdict.LATE_REJECT if policy.late_arrival == "reject" else Verdict.LATE_DROP
            return Recipient(address, late, route)
        if declared_size is not None and declared_size > policy.max_message_bytes:
            return Recipient(address, Verdict.TOO_BIG, route)
        return Recipient(address, Verdict.ACCEPT, route)

    def fault(self, step: str, routes: Iterable[Route | None]) -> Fault | None:
        """The injected fault that hits this SMTP step (``smtp.connect``, ``smtp.rcpt``,
        ``smtp.data``) for mail to these recipients, or None; the caller acts it out.

        Never when one of them is under a policy without faults (``production``); caught
        mail (no route) and a connection (no recipient yet) follow the default policy. A
        run's fault hits mail whose first routed recipient is in that run.
        """
        if self._faults is None or self._faults.is_empty:
            return None  # the usual case, and nothing to look at
        run_id = None
        for route in list(routes) or [None]:
            name = self._settings.default_policy if route is None else route.policy_name
            if not self._settings.policy(name).allow_faults:
                return None
            if run_id is None and route is not None:
                run_id = route.run_id
        return self._faults.take(step, run_id)

    def fault_deadline_s(self, routes: Iterable[Route | None]) -> float:
        """How long an injected ``timeout`` holds this SMTP step: the ``provider_deadline_s``
        of the first routed recipient's policy (the one whose run the fault is matched on),
        else the default policy's (caught mail, a connection)."""
        name = next((r.policy_name for r in routes if r is not None), None)
        return self._settings.policy(name or self._settings.default_policy).provider_deadline_s

    async def deliver(
        self,
        mail_from: str,
        recipients: list[Recipient],
        raw: bytes,
        auth_user: str | None = None,
    ) -> DataVerdict:
        """Store the message once, deliver it to each live inbox, then wake their waiters.

        Returns only once the message is durably stored (the caller answers 250 then).
        """
        now = self._clock.now()
        by_inbox: dict[str, tuple[Route, list[str]]] = {}
        late: dict[str, Late] = {}
        unrouted: list[str] = []
        rejected = 0
        for rcpt in recipients:
            route = rcpt.route
            if rcpt.verdict is Verdict.CAUGHT:
                unrouted.append(rcpt.address)
                continue
            if route is None:
                continue
            policy = self._settings.policy(route.policy_name)
            if len(raw) > policy.max_message_bytes:
                self._metrics.message("rejected")
                return DataVerdict.TOO_BIG
            # The lease is checked again when DATA ends: a slow sender can outlive it.
            if rcpt.verdict is Verdict.LATE_DROP or (
                rcpt.verdict is Verdict.ACCEPT and now >= route.expires_at
            ):
                if policy.late_arrival == "reject" and rcpt.verdict is Verdict.ACCEPT:
                    rejected += 1
                    continue
                late.setdefault(route.inbox_id, Late(route.inbox_id, route.run_id, rcpt.address))
                continue
            if rcpt.verdict is Verdict.ACCEPT:
                by_inbox.setdefault(route.inbox_id, (route, []))[1].append(rcpt.address)
        if rejected and not by_inbox and not late and not unrouted:
            self._metrics.message("rejected", rejected)
            return DataVerdict.ALL_LATE_REJECTED
        deliveries = tuple(
            Delivered(route.inbox_id, route.run_id, self._ids.message_id(), tuple(addresses))
            for route, addresses in by_inbox.values()
        )
        incoming = Incoming(
            raw=raw,
            summary=summarize(raw),
            mail_from=mail_from,
            received_at=now,
            deliveries=deliveries,
            unrouted=tuple(unrouted),
            late=tuple(late.values()),
            caught_id=self._ids.caught_id() if unrouted else None,
            caught_until=now + self._settings.catch_all_retention_s,
            auth_user=auth_user,
        )
        await self._store.save_message(incoming)
        self._waiters.wake(d.inbox_id for d in deliveries)
        if self._events is not None:
            self._events.message(incoming)
        if deliveries:
            self._metrics.message("stored", len(deliveries))
        if unrouted:
            self._metrics.message("caught")
        if late:
            self._metrics.message("late_dropped", len(late))
        for d in deliveries:
            log(
                "message_accepted",
                run_id=d.run_id,
                inbox_id=d.inbox_id,
                message_id=d.message_id,
                size=len(raw),
            )
        if incoming.caught_id is not None:
            log("message_caught", message_id=incoming.caught_id, size=len(raw))
        for item in late.values():
            log(
                "late_arrival",
                run_id=item.run_id,
                inbox_id=item.inbox_id,
                size=len(raw),
                action="dropped",
            )
        return DataVerdict.STORED


def _address_literal(text: str) -> bool:
    """RFC 5321 4.1.3: a dotted-quad IPv4 address, or ``IPv6:`` and an IPv6 address.

    No other tag is registered; ``[300.1.1.1]`` or ``[mail]`` is no address at all.
    """
    tag, colon, rest = text.partition(":")
    try:
        if not colon:
            ipaddress.IPv4Address(text)  # four decimal parts, each 0-255, no leading zeros
        elif tag.upper() == "IPV6" and "%" not in rest:  # no zone: not part of the grammar
            ipaddress.IPv6Address(rest)
        else:
            return False
    except ValueError:
        return False
    return True


def _valid_address(address: str) -> bool:
    if len(address) > 320 or (parsed := _ADDRESS.fullmatch(address)) is None:
        return False
    domain = parsed.group(2)
    if domain.startswith("[") and not _address_literal(domain[1:-1]):
        return False
    # Non-ASCII controls, format characters (zero-width joiners), separators (no-break
    # spaces) and undecodable bytes (surrogate escapes) are not part of any mailbox.
    return address.isascii() or all(
        c.isascii() or unicodedata.category(c)[0] not in "CZ" for c in address
    )
