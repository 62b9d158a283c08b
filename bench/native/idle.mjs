// Native client for bench/bench_idle.py: opens many idle sessions, then
// notes when each receives its first "message" frame. It speaks the same
// line protocol on stdin/stdout as bench_idle.py's own Python client:
//
//   stdin  {"host", "port", "tokens": [...], "in_flight": N}   (one line)
//   stdout {"latencies": [s...], "errors": [...], "wall": s, "cpu": s}
//          once every session is open and has its snapshot
//   stdin  "wait"    the message is about to be posted
//   stdout {"arrivals": [unix s...], "closed": [...], "cpu": s}
//          once every session got the message or ended (60 s at most)
//   stdin  "quit"
//
// Frames are not decoded as text unless they might be the message: a
// snapshot is ~125 KB with 500 participants and only its first bytes are
// looked at. ws answers the server's pings itself. Arrival times are wall
// clock (performance.timeOrigin + performance.now()), as the conductor's
// time.time().

import { createRequire } from "node:module";
import readline from "node:readline";

const require = createRequire(import.meta.url);

function loadWs() {
  for (const name of ["ws", "/usr/share/nodejs/ws", "/usr/lib/nodejs/ws"]) {
    try {
      return require(name);
    } catch {
      // next
    }
  }
  throw new Error("the ws package is missing: npm install in bench/native, or apt-get install node-ws");
}

const WebSocket = loadWs();
const SNAPSHOT = Buffer.from('{"type":"snapshot"');
const MESSAGE = '"type":"message"';
const wallSeconds = () => (performance.timeOrigin + performance.now()) / 1000;
const cpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

const lines = readline.createInterface({ input: process.stdin });
const queue = [];
let waiter = null;
lines.on("line", (line) => {
  if (waiter) {
    const w = waiter;
    waiter = null;
    w(line);
  } else {
    queue.push(line);
  }
});
const nextLine = () =>
  new Promise((resolve) => {
    if (queue.length) resolve(queue.shift());
    else waiter = resolve;
  });

function open(url, token, follow) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const ws = new WebSocket(url, { perMessageDeflate: false });
    // refused (an error frame, then a close), failed or silent: reported, never hung on
    const fail = (why) => {
      clearTimeout(timer);
      ws.terminate();
      reject(new Error(why));
    };
    const timer = setTimeout(() => fail("no snapshot within 60 s"), 60000);
    const onError = (err) => fail(err.message);
    const onClose = (code) => fail(`closed before the snapshot (${code})`);
    ws.once("error", onError);
    ws.once("close", onClose);
    ws.on("open", () => ws.send(JSON.stringify({ type: "authenticate", token })));
    const first = (data) => {
      if (data.length >= SNAPSHOT.length && data.subarray(0, SNAPSHOT.length).equals(SNAPSHOT)) {
        clearTimeout(timer);
        ws.off("message", first);
        ws.off("error", onError);
        ws.off("close", onClose);
        follow(ws);
        resolve((performance.now() - start) / 1000);
      }
    };
    ws.on("message", first);
  });
}

async function main() {
  const job = JSON.parse(await nextLine());
  const url = `ws://${job.host}:${job.port}/ws`;
  const latencies = [];
  const errors = [];
  const arrivals = [];
  const closed = [];
  let sessions = 0;
  let waiting = false;
  let finish = null;
  const check = () => {
    if (waiting && finish && arrivals.length + closed.length >= sessions) finish();
  };
  const follow = (ws) => {
    sessions += 1;
    let got = false;
    ws.on("message", (data) => {
      if (!got && data.length < 65536 && data.includes(MESSAGE)) {
        got = true;
        arrivals.push(wallSeconds());
        check();
      }
    });
    ws.on("close", () => {
      if (!got) {
        got = true;
        closed.push("closed");
        check();
      }
    });
    ws.on("error", (err) => errors.push(String(err.message).slice(0, 200)));
  };

  const cpu0 = cpuSeconds();
  const wall0 = performance.now();
  const tokens = [...job.tokens];
  const worker = async () => {
    while (tokens.length) {
      const token = tokens.shift();
      try {
        latencies.push(await open(url, token, follow));
      } catch (err) {
        errors.push(String(err.message || err).slice(0, 200));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, job.in_flight) }, worker));
  process.stdout.write(
    JSON.stringify({ latencies, errors, wall: (performance.now() - wall0) / 1000, cpu: cpuSeconds() - cpu0 }) + "\n",
  );

  await nextLine(); // "wait"
  const cpu1 = cpuSeconds();
  await new Promise((resolve) => {
    finish = resolve;
    waiting = true;
    check();
    setTimeout(resolve, 60000);
  });
  process.stdout.write(JSON.stringify({ arrivals, closed, cpu: cpuSeconds() - cpu1 }) + "\n");
  await nextLine(); // "quit"
  process.exit(0);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ fatal: String(err.stack || err) }) + "\n");
  process.exit(1);
});
