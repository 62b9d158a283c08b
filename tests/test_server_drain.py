"""The bounds of the server's closing read (``quart_mesh.server``): after an
answer given before the request's body ended, the node reads and discards
what the client still sends until it closes, for at most ``DRAIN_TIMEOUT``
seconds and the bytes given, and then closes. Time is trio's MockClock; the
client is a memory stream (tests/e2e/test_early_answers.py has the real
sockets, and nginx)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import memory_stream_pair

from quart_mesh.server import DRAIN_TIMEOUT, _close_gracefully

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]

LIMIT = 100_000


async def _drained(client_sends: Any) -> tuple[float, int]:
    """How long the closing read took, and how much the client had sent."""
    node, client = memory_stream_pair()
    sent = 0

    async def send(data: bytes) -> None:
        nonlocal sent
        await client.send_all(data)
        sent += len(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client_sends, send, client)
        start = trio.current_time()
        await _close_gracefully(node, DRAIN_TIMEOUT, LIMIT)  # type: ignore[arg-type]
        took = trio.current_time() - start
        nursery.cancel_scope.cancel()
    return took, sent


async def test_the_read_ends_when_the_client_closes(autojump_clock: trio.abc.Clock) -> None:
    async def sends(send: Any, client: Any) -> None:
        await send(b"x" * 1000)
        await trio.sleep(1)
        await client.aclose()

    took, _ = await _drained(sends)
    assert took == pytest.approx(1)


async def test_a_client_that_goes_quiet_is_closed_after_the_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def sends(send: Any, client: Any) -> None:
        await send(b"x" * 1000)
        await trio.sleep_forever()

    took, _ = await _drained(sends)
    assert took == pytest.approx(DRAIN_TIMEOUT)


async def test_a_client_that_goes_on_sending_is_cut_off_at_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def sends(send: Any, client: Any) -> None:
        while True:
            await send(b"x" * 1000)
            await trio.sleep(0.001)

    took, sent = await _drained(sends)
    assert LIMIT <= sent <= LIMIT + 1000
    assert took < DRAIN_TIMEOUT
