"""The web client's first load and a big room, in headless Chromium (Debian's
``/usr/bin/chromium`` through Playwright), against the node as shipped.

For each run, in a fresh browser context (nothing cached), signed in:

- the bytes of HTML, JS and CSS the first load fetched, and whether anything
  came from elsewhere;
- the time from navigation to the room list being drawn (a performance mark
  the client sets), beside a baseline measured in the same run: a cold
  navigation to ``/api/health``, the node's cheapest page;
- the time from clicking a room of 5,000 messages to its newest message being
  shown, beside the same for a room of 50 messages (neither opened before).

    python bench/bench_web.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import httpx
import trio
from _common import command_line, median, start_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


async def prepare(url: str) -> str:
    """Owner, the default room (opened first) and "small" with 50 messages each,
    "archive" with 5,000."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/api/setup/init",
            json={"name": "owner", "password": "bench passphrase", "meshName": "bench"},
        )
        token = r.json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        square = (await http.get("/api/setup/status")).json()["defaultRoomId"]
        archive = (await http.post("/api/rooms", json={"name": "archive"}, headers=headers)).json()
        small = (await http.post("/api/rooms", json={"name": "small"}, headers=headers)).json()

        async def fill(room_id: str, count: int) -> None:
            limiter = trio.Semaphore(16)

            async def one(i: int) -> None:
                async with limiter:
                    await http.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": f"message {i:05d}"},
                        headers=headers,
                    )

            # in order enough for the benchmark: the newest is posted last
            async with trio.open_nursery() as nursery:
                for i in range(count - 1):
                    nursery.start_soon(one, i)
            await one(count - 1)

        await fill(square, 50)
        await fill(small["roomId"], 50)
        await fill(archive["roomId"], 5000)
        return str(token)


def measure(url: str, token: str, runs: int) -> dict[str, list[float]]:
    from playwright.sync_api import expect, sync_playwright

    figures: dict[str, list[float]] = {
        "bytes": [],
        "rooms_ms": [],
        "health_ms": [],
        "big_ms": [],
        "small_ms": [],
    }
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(runs):
            # baseline: the cheapest cold navigation the node serves
            context = browser.new_context()
            page = context.new_page()
            page.goto(url + "/api/health")
            health = page.evaluate(
                "() => performance.getEntriesByType('navigation')[0].loadEventEnd"
            )
            figures["health_ms"].append(health)
            context.close()

            context = browser.new_context()
            context.add_init_script(f"localStorage.setItem('mesh.token', {json.dumps(token)})")
            page = context.new_page()
            requests: list[str] = []
            page.on("request", lambda r, seen=requests: seen.append(r.url))
            page.goto(url + "/")
            nav = page.get_by_role("navigation", name="Rooms and people")
            expect(nav.get_by_role("link", name=re.compile("^archive"))).to_be_visible()
            rendered = page.evaluate(
                "() => performance.getEntriesByName('mesh:rooms-rendered')[0].startTime"
            )
            figures["rooms_ms"].append(rendered)
            sizes = page.evaluate(
                """() => performance.getEntriesByType("navigation")
                   .concat(performance.getEntriesByType("resource"))
                   .filter((e) => /(\\/|\\.js|\\.css)$/.test(e.name))
                   .map((e) => e.decodedBodySize)"""
            )
            figures["bytes"].append(sum(sizes))
            if any(not r.startswith(url) for r in requests):
                raise SystemExit(f"requests outside the node: {requests}")
            log = page.get_by_role("main", name="Conversation").get_by_role("log")
            expect(log.get_by_role("article").filter(has_text="message 00049")).to_be_visible()
            for name, newest, key in (
                ("archive", "message 04999", "big_ms"),
                ("small", "message 00049", "small_ms"),
            ):
                started = time.perf_counter()
                nav.get_by_role("link", name=re.compile(f"^{name}")).click()
                expect(log.get_by_role("article").filter(has_text=newest)).to_be_visible()
                figures[key].append((time.perf_counter() - started) * 1000)
            context.close()
        browser.close()
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server("node", Path(tmp) / "node")
        try:
            token = await prepare(server.url)
            figures = await trio.to_thread.run_sync(measure, server.url, token, args.runs)
        finally:
            server.stop()
    m = {key: median(values) for key, values in figures.items()}
    print(f"\nweb client: median of {args.runs} cold loads, signed in")
    print(f"first load: {m['bytes'] / 1000:.1f} kB of HTML+JS+CSS, all from the node")
    print(
        f"room list drawn after {m['rooms_ms']:.0f} ms; cold GET /api/health page "
        f"{m['health_ms']:.0f} ms (ratio {m['rooms_ms'] / m['health_ms']:.1f}x)"
    )
    print(
        f"open a room of 5,000 messages: {m['big_ms']:.0f} ms; of 50 messages: "
        f"{m['small_ms']:.0f} ms (ratio {m['big_ms'] / m['small_ms']:.2f}x)"
    )
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    trio.run(main)
