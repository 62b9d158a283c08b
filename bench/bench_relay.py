"""Federation relay between two real nodes on loopback: how fast a burst of
messages sent on node A reaches node B's mirror of the shared room, the
latency of one relayed message (B's long-poll returns), and how fast a
backlog drains when B comes back after being down — each against the same
figure on A itself (A's own long-poll, A's own send rate) measured in the same
run, as ratios.

    python bench/bench_relay.py [--messages 500] [--backlog 2000] [--senders 8]
                                [--rounds 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
from _common import ServerProcess, command_line, median, percentile, raise_fd_limit, start_server

PASSWORD = "bench passphrase"


async def setup(a_url: str, b_url: str, senders: int) -> dict[str, Any]:
    """Both meshes, a connection, a room of A shared with B; *senders* members
    on A and a reader on each node, all in the room (or its mirror)."""
    async with (
        httpx.AsyncClient(base_url=a_url, timeout=60) as a,
        httpx.AsyncClient(base_url=b_url, timeout=60) as b,
    ):
        owner_a = (
            await a.post(
                "/api/setup/init",
                json={"name": "owner", "password": PASSWORD, "meshName": "bench a"},
            )
        ).json()
        owner_b = (
            await b.post(
                "/api/setup/init",
                json={"name": "owner", "password": PASSWORD, "meshName": "bench b"},
            )
        ).json()
        ha = {"Authorization": f"Bearer {owner_a['token']}"}
        hb = {"Authorization": f"Bearer {owner_b['token']}"}
        room = (await a.post("/api/rooms", json={"name": "relay"}, headers=ha)).json()["roomId"]
        connection = (
            await a.post("/api/connections/request", json={"url": b_url}, headers=ha)
        ).json()["id"]
        r = await b.post(f"/api/connections/{connection}/accept", headers=hb)
        assert r.status_code == 200, r.text
        r = await a.post(f"/api/connections/{connection}/rooms", json={"roomId": room}, headers=ha)
        assert r.status_code == 201, r.text
        [conn] = (await b.get("/api/connections", headers=hb)).json()
        mirror = conn["sharedRooms"][0]["roomId"]
        tokens = [owner_a["token"]]
        for i in range(senders):
            r = await a.post("/api/auth/register", json={"name": f"s{i}", "password": PASSWORD})
            tokens.append(r.json()["token"])
        for token in tokens[1:]:
            await a.post(f"/api/rooms/{room}/join", headers={"Authorization": f"Bearer {token}"})
        reader_b = (
            await b.post("/api/auth/register", json={"name": "reader", "password": PASSWORD})
        ).json()["token"]
        await b.post(f"/api/rooms/{mirror}/join", headers={"Authorization": f"Bearer {reader_b}"})
    return {
        "room": room,
        "mirror": mirror,
        "owner_a": tokens[0],
        "senders": tokens[1:],
        "reader_b": reader_b,
    }


async def send_all(a: httpx.AsyncClient, mesh: dict[str, Any], each: int, content: str) -> None:
    """Every sender posts *each* messages over REST on A, all at once."""

    async def send(token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(each):
            r = await a.post(
                f"/api/rooms/{mesh['room']}/messages", json={"content": content}, headers=headers
            )
            assert r.status_code == 201, r.text

    async with trio.open_nursery() as nursery:
        for token in mesh["senders"]:
            nursery.start_soon(send, token)


async def burst(a_url: str, b_url: str, mesh: dict[str, Any], messages: int) -> dict[str, float]:
    """Send *messages* on A from every sender at once; A's send rate, and the
    rate at which they became readable on B (from the first send)."""
    per_sender = messages // len(mesh["senders"])
    total = per_sender * len(mesh["senders"])
    limits = httpx.Limits(max_connections=len(mesh["senders"]))
    async with (
        httpx.AsyncClient(base_url=a_url, limits=limits, timeout=60) as a,
        httpx.AsyncClient(base_url=b_url, timeout=60) as b,
    ):
        hb = {"Authorization": f"Bearer {mesh['reader_b']}"}
        cursor = (await b.post("/api/poll", json={}, headers=hb)).json()["cursor"]
        arrived = 0
        sent_at = 0.0
        relayed_at = 0.0

        async def read() -> None:
            nonlocal arrived, cursor, relayed_at
            while arrived < total:
                r = await b.post(
                    "/api/poll", json={"cursor": cursor, "timeout": 10, "limit": 200}, headers=hb
                )
                body = r.json()
                arrived += len(body["messages"])
                cursor = body["cursor"]
            relayed_at = time.perf_counter()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await send_all(a, mesh, per_sender, "x")
            sent_at = time.perf_counter()
    return {"send_per_s": total / (sent_at - t0), "relay_per_s": total / (relayed_at - t0)}


async def latency(url: str, reader: str, room: str, a_url: str, sender: str, rounds: int) -> float:
    """Median seconds from A's send to the reader's long-poll returning (on *url*)."""
    times: list[float] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as reader_http,
        httpx.AsyncClient(base_url=a_url, timeout=30) as a,
    ):
        hr = {"Authorization": f"Bearer {reader}"}
        hs = {"Authorization": f"Bearer {sender}"}
        cursor = (await reader_http.post("/api/poll", json={}, headers=hr)).json()["cursor"]
        for _ in range(rounds):
            result: dict[str, Any] = {}

            async def wait(result: dict[str, Any] = result, cursor: str = cursor) -> None:
                r = await reader_http.post(
                    "/api/poll", json={"cursor": cursor, "timeout": 10}, headers=hr
                )
                result.update(r.json())
                result["t"] = time.perf_counter()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(0.005)
                t0 = time.perf_counter()
                await a.post(f"/api/rooms/{room}/messages", json={"content": "p"}, headers=hs)
            times.append(result["t"] - t0)
            cursor = result["cursor"]
    return percentile(times, 50)


async def drain(
    a_url: str, b: ServerProcess, b_dir: Path, mesh: dict[str, Any], backlog: int
) -> tuple[ServerProcess, dict[str, float]]:
    """Stop B, send *backlog* messages on A, start B again on its port: A's
    send rate, and the rate at which the backlog became readable on B (from
    the first relayed message to the last, so A's retry wait does not count)."""
    port = b.host_port[1]
    hb = {"Authorization": f"Bearer {mesh['reader_b']}"}
    async with httpx.AsyncClient(base_url=b.url, timeout=60) as http:
        cursor = (await http.post("/api/poll", json={}, headers=hb)).json()["cursor"]
    b.stop()
    per_sender = backlog // len(mesh["senders"])
    total = per_sender * len(mesh["senders"])
    limits = httpx.Limits(max_connections=len(mesh["senders"]))
    async with httpx.AsyncClient(base_url=a_url, limits=limits, timeout=60) as a:
        t0 = time.perf_counter()
        await send_all(a, mesh, per_sender, "y")
        sent = total / (time.perf_counter() - t0)
    b = start_server("node", b_dir, str(port))
    async with httpx.AsyncClient(base_url=b.url, timeout=60) as http:
        arrived, first, first_batch = 0, 0.0, 0
        with trio.fail_after(300):
            while arrived < total:
                r = await http.post(
                    "/api/poll", json={"cursor": cursor, "timeout": 30, "limit": 200}, headers=hb
                )
                body = r.json()
                if body["messages"] and not first:
                    first, first_batch = time.perf_counter(), len(body["messages"])
                arrived += len(body["messages"])
                cursor = body["cursor"]
        last = time.perf_counter()
    # counted from the first poll that returned any: what came after it
    drained = (arrived - first_batch) / (last - first)
    return b, {"send_per_s": sent, "drain_per_s": drained}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    raise_fd_limit()
    rows: dict[str, list[float]] = {
        "send": [],
        "relay": [],
        "local_ms": [],
        "relay_ms": [],
        "backlog_send": [],
        "drain": [],
    }
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            a = start_server("node", Path(tmp) / "a")
            b = start_server("node", Path(tmp) / "b")
            try:
                mesh = await setup(a.url, b.url, args.senders)
                # A's own long-poll reader is its owner (a member of the room)
                local = await latency(
                    a.url, mesh["owner_a"], mesh["room"], a.url, mesh["senders"][0], args.rounds
                )
                remote = await latency(
                    b.url, mesh["reader_b"], mesh["room"], a.url, mesh["senders"][0], args.rounds
                )
                rows["local_ms"].append(local * 1e3)
                rows["relay_ms"].append(remote * 1e3)
                rates = await burst(a.url, b.url, mesh, args.messages)
                rows["send"].append(rates["send_per_s"])
                rows["relay"].append(rates["relay_per_s"])
                b, drained = await drain(a.url, b, Path(tmp) / "b", mesh, args.backlog)
                rows["backlog_send"].append(drained["send_per_s"])
                rows["drain"].append(drained["drain_per_s"])
            finally:
                a.stop()
                b.stop()
    send, relay = median(rows["send"]), median(rows["relay"])
    local_ms, relay_ms = median(rows["local_ms"]), median(rows["relay_ms"])
    print(
        f"\nrelay: {args.messages} messages from {args.senders} senders, "
        f"{args.rounds} latency rounds, median of {args.runs} runs"
    )
    print(f"burst: sent on A {send:.0f}/s, readable on B {relay:.0f}/s ({relay / send:.2f}x)")
    print(
        f"latency p50: A's own long-poll {local_ms:.1f} ms, B's long-poll {relay_ms:.1f} ms "
        f"({relay_ms / local_ms:.1f}x)"
    )
    backlog_send, drained = median(rows["backlog_send"]), median(rows["drain"])
    print(
        f"backlog of {args.backlog} sent while B was down: sent on A {backlog_send:.0f}/s, "
        f"drained to B {drained:.0f}/s ({drained / backlog_send:.2f}x)"
    )
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    trio.run(main)
