"""Embed a node beside your own tasks, follow its events, and stop on Ctrl+C
(docs/embedding.md, "Your tasks, the node's events and Ctrl+C together").

Run it:  python docs/examples/follow_events_until_signal.py
(configured like ``quart-mesh serve``, by ``MESH_*`` variables: MESH_DATA_DIR,
MESH_PORT, ...). It sets the mesh up (owner ``host``, password ``a long
passphrase``; on a later run it logs in), then prints every message the owner
can read as it is posted: ``seq <cursor> <sender>: <content>``.

``EVENTS_CAPACITY`` (default: ``settings.subscriber_buffer``, 1,024) is how
many events may wait for it; set it small (``EVENTS_CAPACITY=1``) and post a
burst to see it fall behind and resume from the cursor without losing a
message. Ctrl+C or SIGTERM: WebSocket clients get close code 1001, the
process exits 0. It is also a test: tests/e2e/test_embed_follow_events.py.

Public names only: ``quart_mesh`` and ``quart_mesh.events``.
"""

from __future__ import annotations

import logging
import os
import sys

import trio

from quart_mesh import (
    AccessEnded,
    Actor,
    Conflict,
    MessagePosted,
    Node,
    Settings,
    StreamLagged,
    create_app,
    open_node,
    serve,
    wait_for_signal,
)

log = logging.getLogger("follow_events")


async def owner(node: Node) -> Actor:
    """The mesh's owner: set the mesh up, or log in when an earlier run did."""
    try:
        signed_in = await node.accounts.init_setup(
            name="host", password="a long passphrase", mesh_name="Embedded"
        )
    except Conflict:
        signed_in = await node.accounts.login("host", "a long passphrase")
    return await node.accounts.authenticate(signed_in.token)


async def follow(node: Node, actor: Actor, capacity: int | None) -> None:
    """Print every message *actor* can read, in order, none lost."""
    cursor: int | None = None  # from now on (save stream.cursor to resume after a restart)
    while True:
        try:
            async with node.events(actor, since=cursor, capacity=capacity) as stream:
                async for event in stream:
                    if isinstance(event, MessagePosted):
                        message = event.message
                        print(
                            f"seq {message.seq} {message.sender_name}: {message.content}",
                            flush=True,
                        )
                return  # the subscription closed: the node is stopping
        except StreamLagged as lagged:
            log.warning("fell behind after cursor %s; resuming from it", lagged.cursor)
            cursor = lagged.cursor
        except AccessEnded as ended:
            log.warning("the owner's access ended (%s)", ended.reason)
            return


async def main() -> None:
    settings = Settings.from_env()
    capacity = int(os.environ["EVENTS_CAPACITY"]) if os.environ.get("EVENTS_CAPACITY") else None
    # Open the node first, so that your tasks hold it before it is served;
    # `serve` then runs this node (and leaves it open: this block closes it).
    async with open_node(settings) as node:
        actor = await owner(node)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, node, actor, capacity)
            # serve in the main task, so that a second Ctrl+C interrupts the stop
            await serve(
                create_app(node=node),
                host=settings.host,
                port=settings.port,
                shutdown_trigger=wait_for_signal,
            )
            nursery.cancel_scope.cancel()  # the node has stopped: end your tasks too
    log.info("stopped")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    interrupted = False
    try:
        trio.run(main)
    except* KeyboardInterrupt:  # a second Ctrl+C while stopping
        interrupted = True
    sys.exit(130 if interrupted else 0)
