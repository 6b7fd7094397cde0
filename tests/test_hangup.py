"""A waiting request hears its client hang up: through the protocol's mark, or a watcher."""

from __future__ import annotations

import asyncio
from typing import Any

from api import hangup


async def _parked(ended: list[str]) -> str:
    try:
        await asyncio.sleep(30)
    finally:
        ended.append("cleaned up")
    return "answered"


def test_a_hangup_heard_by_the_protocol_cancels_the_work_and_not_the_request() -> None:
    """With the protocol's mark, a lost connection cancels the parked work in the request's own
    task; the request itself carries on (uncancelled) and learns the client is gone."""

    async def scenario() -> tuple[Any, list[str], int, bool]:
        scope: dict[str, Any] = {}
        hangup.mark(scope)
        ended: list[str] = []

        async def request() -> tuple[Any, int]:
            result = await hangup.unless_gone(scope, _never, _parked(ended))
            await asyncio.sleep(0)  # still runnable: the cancellation was consumed
            task = asyncio.current_task()
            assert task is not None
            return result, task.cancelling()

        task = asyncio.create_task(request())
        await asyncio.sleep(0.01)
        hangup.lost(scope)
        result, cancelling = await task
        return result, ended, cancelling, scope[hangup.KEY] is hangup.LISTENING

    result, ended, cancelling, disarmed = asyncio.run(scenario())
    assert result is None and ended == ["cleaned up"] and cancelling == 0 and disarmed


def test_work_that_ends_first_is_the_answer_and_a_later_hangup_does_nothing() -> None:
    """The work's result is returned; the mark is disarmed, so a hang-up afterwards cancels
    nothing."""

    async def scenario() -> tuple[Any, bool]:
        scope: dict[str, Any] = {}
        hangup.mark(scope)

        async def quick() -> str:
            return "answered"

        result = await hangup.unless_gone(scope, _never, quick())
        hangup.lost(scope)
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling() == 0

    assert asyncio.run(scenario()) == ("answered", True)


def test_another_cancellation_is_not_taken_for_a_hangup() -> None:
    """A shutdown's cancellation of the request passes through as a cancellation."""

    async def scenario() -> bool:
        scope: dict[str, Any] = {}
        hangup.mark(scope)
        task = asyncio.create_task(hangup.unless_gone(scope, _never, _parked([])))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(scenario())


def test_without_the_mark_a_watcher_reads_receive() -> None:
    """Under another server, ``receive()`` saying http.disconnect ends the work (cancelled)."""

    async def scenario() -> tuple[Any, list[str]]:
        ended: list[str] = []
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        task = asyncio.create_task(hangup.unless_gone({}, receive, _parked(ended)))
        await asyncio.sleep(0.01)
        gone.set()
        return await task, ended

    assert asyncio.run(scenario()) == (None, ["cleaned up"])


async def _never() -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {"type": "http.disconnect"}
