"""The descriptor budget: caps as configured when they fit, scaled down when they do not."""

from __future__ import annotations

import pytest

from sink.capacity import RESERVED_MIN, needed, plan


def test_caps_that_fit_are_kept() -> None:
    """Under a generous limit the configured caps stand, and long-polls leave room."""
    sized = plan(20_000, 512, 4096)
    assert (sized.smtp_connections, sized.http_connections, sized.lowered) == (512, 4096, False)
    assert sized.long_polls == 4096 - 512


@pytest.mark.parametrize("limit", [128, 256, 1024, 4096])
def test_caps_that_do_not_fit_are_scaled_under_the_limit(limit: int) -> None:
    """At a low limit, SMTP + HTTP + the reserve never exceed it, and both keep a share."""
    sized = plan(limit, 512, 4096)
    assert sized.lowered
    assert sized.smtp_connections + sized.http_connections + sized.reserved <= limit
    assert sized.reserved >= RESERVED_MIN
    assert sized.smtp_connections >= 8 and sized.http_connections >= 8
    assert 0 < sized.long_polls < sized.http_connections


def test_needed_is_the_least_limit_that_fits() -> None:
    """``needed`` is a limit under which plan keeps both caps as configured."""
    for smtp, http in [(512, 4096), (10, 10), (5000, 100)]:
        assert not plan(needed(smtp, http), smtp, http).lowered


def test_a_limit_with_no_room_is_refused() -> None:
    """A limit that leaves nothing past the reserve is an error, not a zero cap."""
    with pytest.raises(ValueError, match="ulimit"):
        plan(70, 512, 4096)
