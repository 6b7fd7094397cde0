"""UI sessions over real HTTP: none is evicted by other sign-ins, and failed sign-ins from
one address are throttled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Server, start_server

ADMIN = "admin-token-for-session-tests"
READER = "read-token-for-session-tests"


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Server]:
    """A server with an admin and a read token (its own: the throttle counts per address)."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[tokens.admin]\ntoken = "{ADMIN}"\nscope = "admin"\n\n'
        f'[tokens.dashboard]\ntoken = "{READER}"\nscope = "read"\n'
    )
    running = start_server(tmp_path / "server", "--tokens-file", str(tokens))
    yield running
    running.stop()


def _sign_in(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/signin", data={"token": token})


def test_a_thousand_other_sign_ins_never_evict_a_session(guarded: Server) -> None:
    """An admin's session survives 1,001 sign-ins with another token; that token's sessions
    past its share are refused 429 (with Retry-After) instead of evicting anyone's."""
    with guarded.http(follow_redirects=False) as admin:
        assert _sign_in(admin, ADMIN).status_code == 303
        with guarded.http(follow_redirects=False) as other:
            answers = [_sign_in(other, READER) for _ in range(1001)]
        statuses = [answer.status_code for answer in answers]
        assert statuses[:1000] == [303] * 1000
        assert statuses[1000] == 429 and int(answers[1000].headers["retry-after"]) >= 1
        assert admin.get("/").status_code == 200  # still signed in
        first = answers[0].cookies.get("runsink_session")
    with guarded.http(follow_redirects=False) as reader:
        reader.cookies.set("runsink_session", first or "")
        assert reader.get("/").status_code == 200  # the first of the others is kept too


def test_failed_sign_ins_past_ten_a_minute_get_429(guarded: Server) -> None:
    """Ten wrong tokens from one address are 401; then any sign-in from it, even with the
    right token, is 429 with Retry-After, and no session is made."""
    with guarded.http(follow_redirects=False) as client:
        wrong = [_sign_in(client, f"wrong-token-number-{n:04d}").status_code for n in range(10)]
        assert wrong == [401] * 10
        throttled = _sign_in(client, f"wrong-token-number-{10:04d}")
        assert throttled.status_code == 429
        assert 1 <= int(throttled.headers["retry-after"]) <= 60
        right = _sign_in(client, ADMIN)
        assert right.status_code == 429 and "set-cookie" not in right.headers
