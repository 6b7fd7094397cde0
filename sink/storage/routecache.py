"""The route cache: each RCPT asks for a route, and most ask for one asked for just before.

A store keeps the newest routes by local part and forgets one the moment its inbox ends
(by inbox id, right after the commit that ends it). SQLite knows every such moment (its
process is the only writer); PostgreSQL learns other replicas' from its listener and drops
the whole cache on every reconnect, when what was announced meanwhile is unknown.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sink.storage.base import Route


class RouteCache:
    """The newest routes asked for, by local part; forgotten by inbox id when one expires."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._by_local: OrderedDict[str, Route] = OrderedDict()
        self._local_of: dict[str, str] = {}

    def get(self, local_part: str) -> Route | None:
        route = self._by_local.get(local_part)
        if route is not None:
            self._by_local.move_to_end(local_part)
        return route

    def remember(self, local_part: str, route: Route) -> None:
        self._by_local[local_part] = route
        self._local_of[route.inbox_id] = local_part
        if len(self._by_local) > self._size:
            _, oldest = self._by_local.popitem(last=False)
            self._local_of.pop(oldest.inbox_id, None)

    def forget(self, inbox_ids: Iterable[str]) -> None:
        for inbox_id in inbox_ids:
            local_part = self._local_of.pop(inbox_id, None)
            if local_part is not None:
                self._by_local.pop(local_part, None)
