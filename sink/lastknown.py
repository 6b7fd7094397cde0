"""The inboxes this process last saw, for answering while the store cannot be read.

With PostgreSQL down (or failing over) no inbox can be loaded, yet the contract answers
provider trouble with an envelope: the state *unchanged*, ``retryable``,
``wait_then_retry``. This is where "unchanged" comes from: every inbox this process loaded
or answered for, as it last was, and which inbox each message it handed out belongs to.
Bounded (least recently used go first) and used only when the store fails: it is never an
authority on anything (the store is), just the last thing this process knew.

Pure: no I/O, no asyncio.
"""

from __future__ import annotations

from collections import OrderedDict

from sink.inbox import Inbox

KEPT = 8192  # inboxes (a few hundred bytes each); their messages' ids ride along


class LastKnown:
    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._inboxes: OrderedDict[str, Inbox] = OrderedDict()
        self._messages: OrderedDict[str, str] = OrderedDict()  # message_id -> inbox_id

    def __len__(self) -> int:
        return len(self._inboxes)

    def saw(self, inbox: Inbox) -> None:
        """``inbox`` as the store (or this process's last write) has it now."""
        self._inboxes[inbox.inbox_id] = inbox
        self._inboxes.move_to_end(inbox.inbox_id)
        if len(self._inboxes) > self._kept:
            self._inboxes.popitem(last=False)
        if inbox.evidence is not None:
            self.saw_message(inbox.evidence.message_id, inbox.inbox_id)

    def saw_message(self, message_id: str, inbox_id: str) -> None:
        self._messages[message_id] = inbox_id
        self._messages.move_to_end(message_id)
        if len(self._messages) > self._kept:
            self._messages.popitem(last=False)

    def inbox(self, inbox_id: str) -> Inbox | None:
        return self._inboxes.get(inbox_id)

    def inbox_of(self, message_id: str) -> Inbox | None:
        inbox_id = self._messages.get(message_id)
        return None if inbox_id is None else self._inboxes.get(inbox_id)
