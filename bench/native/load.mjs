// Native load generator for bench/bench_speed.py and bench/guard.py.
//
//   node bench/native/load.mjs '<json config>'
//
// One process runs one share of a workload. It connects (and, for WebSocket,
// authenticates every connection), prints {"ready": true}, then waits for a
// line {"t0": <ms>} on stdin: it starts the load at once (what runs before t0
// is the warm-up), counts what completes between t0 and t0 + duration, and
// prints one JSON result line. Times are CLOCK_MONOTONIC milliseconds
// (process.hrtime here, time.monotonic() in Python: the same clock), so the
// driver can line up several client processes and the server's CPU readings.
//
// Config (JSON):
//   kind        "ws" | "http"
//   url         "http://127.0.0.1:PORT"
//   duration    measured seconds
//   ws:   path ("/ws"), room, senders [tokens], receivers [tokens],
//         window (sends in flight per sender), rate (messages/s over this
//         process's senders, open loop; 0 = closed loop, window-bound),
//         idPrefix (unique per process: clientIds are <idPrefix>s<i>.<n>)
//   http: method, path, tokens (optional: connection i sends tokens[i % n]
//         as a bearer token), body (optional JSON value), connections
//         (keep-alive connections, one request in flight each)
//   check  prints {"ok": true, "ws": <where ws came from>} and exits
//
// Result (JSON): sent, acked (own messages echoed back / HTTP responses
// 2xx), deliveries (message frames at the receivers), errors, errorSamples,
// cpuMs (this process's user + system CPU over the window), elapsedMs,
// latency histograms (echo: send -> own echo; deliver: send -> receiver;
// request: HTTP round trip), each {n, p50, p99, p999, hist} in ms, where
// hist maps round(100 * ln(microseconds)) to counts (1 % buckets) so the
// driver can merge processes.

import http from "node:http";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

function loadWs() {
  // bench/native/node_modules (npm install) or NODE_PATH, else Debian's
  // node-ws (/usr/share/nodejs/ws)
  const candidates = ["ws", "/usr/share/nodejs/ws", "/usr/lib/nodejs/ws"];
  for (const name of candidates) {
    try {
      const ws = require(name);
      ws.resolvedFrom = require.resolve(name);
      return ws;
    } catch {
      // next
    }
  }
  throw new Error("the ws package is missing: npm install in bench/native, or apt-get install node-ws");
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const nowUs = () => Number(process.hrtime.bigint() / 1000n);

class Hist {
  constructor() {
    this.buckets = new Map();
    this.n = 0;
  }
  addUs(us) {
    const key = Math.round(100 * Math.log(Math.max(us, 1)));
    this.buckets.set(key, (this.buckets.get(key) || 0) + 1);
    this.n += 1;
  }
  quantile(q) {
    if (!this.n) return null;
    const keys = [...this.buckets.keys()].sort((a, b) => a - b);
    const rank = Math.min(this.n - 1, Math.floor(q * this.n));
    let seen = 0;
    for (const key of keys) {
      seen += this.buckets.get(key);
      if (seen > rank) return Math.exp(key / 100) / 1000;
    }
    return Math.exp(keys[keys.length - 1] / 100) / 1000;
  }
  toJSON() {
    return {
      n: this.n,
      p50: this.quantile(0.5),
      p99: this.quantile(0.99),
      p999: this.quantile(0.999),
      hist: Object.fromEntries(this.buckets),
    };
  }
}

const config = JSON.parse(process.argv[2]);
const state = {
  measuring: false,
  sent: 0,
  acked: 0,
  deliveries: 0,
  errors: 0,
  errorSamples: [],
  echo: new Hist(),
  deliver: new Hist(),
  request: new Hist(),
  stopped: false,
};

function noteError(text) {
  state.errors += 1;
  if (state.errorSamples.length < 3) state.errorSamples.push(String(text).slice(0, 300));
}

const CONTENT = '"content":';

function sentAtUs(frame) {
  // content is "<send time in µs> x"
  let i = frame.indexOf(CONTENT);
  if (i < 0) return NaN;
  i += CONTENT.length;
  while (frame[i] === " ") i += 1;
  const j = frame.indexOf(" ", i + 1);
  return Number(frame.slice(i + 1, j));
}

const isMessage = (frame) =>
  frame.includes('"type":"message"') || frame.includes('"type": "message"');
const isError = (frame) => frame.includes('"type":"error"') || frame.includes('"type": "error"');

function wsUrl() {
  return config.url.replace(/^http/, "ws") + (config.path || "/ws");
}

function openSocket(WebSocket, token) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl(), { perMessageDeflate: false });
    const timer = setTimeout(() => reject(new Error("authentication timed out")), 60000);
    ws.once("error", reject);
    ws.on("open", () => ws.send(JSON.stringify({ type: "authenticate", token })));
    const onMessage = (data) => {
      const frame = data.toString();
      if (frame.includes('"snapshot"')) {
        clearTimeout(timer);
        ws.off("message", onMessage);
        ws.off("error", reject);
        ws.on("error", (err) => noteError(err.message));
        resolve(ws);
      } else if (isError(frame)) {
        clearTimeout(timer);
        reject(new Error(frame));
      }
    };
    ws.on("message", onMessage);
  });
}

async function openAll(WebSocket, tokens) {
  // a few at a time: a burst of hundreds of handshakes is not what we measure
  const out = [];
  for (let i = 0; i < tokens.length; i += 20) {
    out.push(...(await Promise.all(tokens.slice(i, i + 20).map((t) => openSocket(WebSocket, t)))));
  }
  return out;
}

async function setupWs() {
  const WebSocket = loadWs();
  const receivers = await openAll(WebSocket, config.receivers || []);
  const senders = await openAll(WebSocket, config.senders || []);
  for (const ws of receivers) {
    ws.on("message", (data) => {
      const frame = data.toString();
      if (isMessage(frame)) {
        if (!state.measuring) return;
        state.deliveries += 1;
        const t = sentAtUs(frame);
        if (t === t) state.deliver.addUs(nowUs() - t);
      } else if (isError(frame)) {
        noteError(frame);
      }
    });
  }
  const room = config.room;
  const window = config.window || 1;
  const senderStates = senders.map((ws, i) => ({ ws, prefix: `${config.idPrefix || "p"}s${i}.`, n: 0, inFlight: 0 }));
  const sendOne = (s) => {
    s.n += 1;
    s.inFlight += 1;
    if (state.measuring) state.sent += 1;
    s.ws.send(
      `{"type":"send_message","roomId":${JSON.stringify(room)},"content":"${nowUs()} x","clientId":"${s.prefix}${s.n}"}`,
    );
  };
  for (const s of senderStates) {
    const marker = `"${s.prefix}`;
    s.ws.on("message", (data) => {
      const frame = data.toString();
      if (!frame.includes(marker)) {
        if (isError(frame)) noteError(frame);
        return;
      }
      s.inFlight -= 1;
      if (isMessage(frame)) {
        if (state.measuring) {
          state.acked += 1;
          const t = sentAtUs(frame);
          if (t === t) state.echo.addUs(nowUs() - t);
        }
      } else {
        noteError(frame);
      }
      if (!config.rate && !state.stopped) sendOne(s);
    });
  }
  return () => {
    if (!config.rate) {
      for (const s of senderStates) for (let k = 0; k < window; k += 1) sendOne(s);
      return;
    }
    if (!senderStates.length) return;
    // open loop: the n-th message leaves at start + n / rate, whatever comes
    // back (round-robin over this process's senders); a 1 ms timer sends what is due
    const start = nowMs();
    let due = 0;
    let next = 0;
    const tick = () => {
      if (state.stopped) return;
      const target = Math.floor(((nowMs() - start) / 1000) * config.rate);
      while (due < target) {
        sendOne(senderStates[next]);
        next = (next + 1) % senderStates.length;
        due += 1;
      }
      setTimeout(tick, 1);
    };
    tick();
  };
}

async function setupHttp() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: config.connections, maxFreeSockets: config.connections });
  const url = new URL(config.path, config.url);
  const body = config.body === undefined ? null : Buffer.from(JSON.stringify(config.body));
  const tokens = config.tokens || [];
  const optionsFor = (i) => {
    const headers = {};
    if (tokens.length) headers.Authorization = `Bearer ${tokens[i % tokens.length]}`;
    if (body) {
      headers["Content-Type"] = "application/json";
      headers["Content-Length"] = body.length;
    }
    return {
      agent,
      method: config.method || "GET",
      hostname: url.hostname,
      port: url.port,
      path: url.pathname + url.search,
      headers,
    };
  };
  const one = (options, done) => {
    const t = nowUs();
    const req = http.request(options, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        if (res.statusCode >= 200 && res.statusCode < 300) {
          if (state.measuring) {
            state.acked += 1;
            state.request.addUs(nowUs() - t);
          }
        } else {
          noteError(`${res.statusCode} ${Buffer.concat(chunks).toString()}`);
        }
        done();
      });
    });
    req.on("error", (err) => {
      noteError(err.message);
      setTimeout(done, 10);
    });
    if (state.measuring) state.sent += 1;
    req.end(body);
  };
  // one request first, so the connections are known to work before "ready"
  await new Promise((resolve) => one(optionsFor(0), resolve));
  if (state.errors) throw new Error(`first request failed: ${state.errorSamples[0]}`);
  return () => {
    for (let i = 0; i < config.connections; i += 1) {
      const options = optionsFor(i);
      const loop = () => {
        if (!state.stopped) one(options, loop);
      };
      loop();
    }
  };
}

function readLine() {
  return new Promise((resolve) => {
    let buffer = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => {
      buffer += chunk;
      const i = buffer.indexOf("\n");
      if (i >= 0) resolve(buffer.slice(0, i));
    });
  });
}

async function main() {
  if (config.kind === "check") {
    const ws = loadWs();
    process.stdout.write(JSON.stringify({ ok: true, ws: ws.resolvedFrom, node: process.version }) + "\n");
    return;
  }
  const start = config.kind === "http" ? await setupHttp() : await setupWs();
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  const go = JSON.parse(await readLine());
  start();
  const t0 = go.t0;
  const t1 = t0 + config.duration * 1000;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, t0 - nowMs())));
  const cpu0 = process.cpuUsage();
  const m0 = nowMs();
  state.measuring = true;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, t1 - nowMs())));
  state.measuring = false;
  const cpu = process.cpuUsage(cpu0);
  const elapsedMs = nowMs() - m0;
  state.stopped = true;
  const result = {
    sent: state.sent,
    acked: state.acked,
    deliveries: state.deliveries,
    errors: state.errors,
    errorSamples: state.errorSamples,
    cpuMs: (cpu.user + cpu.system) / 1000,
    elapsedMs,
    echo: state.echo.toJSON(),
    deliver: state.deliver.toJSON(),
    request: state.request.toJSON(),
  };
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(0));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ fatal: String(err && err.stack ? err.stack : err) }) + "\n", () =>
    process.exit(1),
  );
});
