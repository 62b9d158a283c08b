"""Embedding quart-mesh in your own Trio program (docs/embedding.md).

Run it:  python docs/examples/embed.py
It keeps its meshes in ./embedded-mesh-data (ignored by git): a second run
finds them set up and logs in instead. Delete the folder to start afresh.
It is also a test: tests/test_embedding.py runs it, twice, in a clone.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import trio

from quart_mesh import Conflict, Settings, create_app, open_node, serve

NAME, PASSWORD = "host", "a long passphrase"


async def serve_and_use(data_dir: Path) -> list[str]:
    """Serve a node on a free loopback port, talk to it over HTTP and in-process."""
    app = create_app(Settings(data_dir=data_dir))
    async with trio.open_nursery() as nursery:
        # serve() opens the node, runs it, and reports the URL once it listens
        url = await nursery.start(partial(serve, app, host="127.0.0.1", port=0))
        node = app.node  # open while it is served

        # 1. any HTTP client can use it
        async with httpx.AsyncClient(base_url=url) as http:
            r = await http.post(
                "/api/setup/init",
                json={"name": NAME, "password": PASSWORD, "meshName": "Embedded"},
            )
            if r.status_code == 409:  # set up by an earlier run: log in
                r = await http.post("/api/auth/login", json={"name": NAME, "password": PASSWORD})
            r.raise_for_status()
            token = r.json()["token"]

            # 2. and your own code can call the node's services directly
            actor = await node.accounts.authenticate(token)
            try:
                room = await node.rooms.create(actor, "from-python")
            except Conflict:  # created by an earlier run
                rooms = await node.rooms.list_rooms(actor)
                room = next(room for room, _joined in rooms if room.name == "from-python")
            await node.messages.send(actor, room.room_id, "hello from the host program")

            # what an HTTP client sees is what the services wrote
            r = await http.get(
                f"/api/rooms/{room.room_id}/messages",
                headers={"Authorization": f"Bearer {token}"},
            )
            contents = [m["content"] for m in r.json()]

        nursery.cancel_scope.cancel()  # stop serving; the node closes its store
    return contents


async def node_without_http(data_dir: Path) -> list[str]:
    """Run only the Node (no HTTP server) and use its services: the names of
    the rooms a new mesh has (setup makes its default room)."""
    # open_node opens the store (applying migrations) and builds every service
    async with open_node(Settings(data_dir=data_dir)) as node, trio.open_nursery() as nursery:
        await nursery.start(node.run)  # its background parts: the store's writer, bots, ...
        try:
            owner = await node.accounts.init_setup(
                name="solo", password=PASSWORD, mesh_name="Headless"
            )
        except Conflict:  # set up by an earlier run
            owner = await node.accounts.login("solo", PASSWORD)
        actor = node.accounts.actor_for(owner.participant)
        rooms = await node.rooms.list_rooms(actor)
        nursery.cancel_scope.cancel()
    return [room.name for room, _joined in rooms]


async def main(data_dir: Path = Path("embedded-mesh-data")) -> None:
    print(await serve_and_use(data_dir / "served"))
    print(await node_without_http(data_dir / "headless"))


if __name__ == "__main__":
    trio.run(main)
