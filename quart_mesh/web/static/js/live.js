// The live connection: one WebSocket on /ws (docs/websocket.md).
//
// It authenticates with `autoRead: false` (the page marks what the person has
// seen itself, with `mark_read`) and, after the first connection, with `since`:
// the cursor of the newest message it has been given, so the node replays
// what was missed while disconnected. When the socket drops it reconnects with
// exponential backoff (0.5 s doubling to 15 s, with jitter), at once when the
// browser comes back online or the person asks.

import { cursorCompare } from "./dom.js";

/** Close reasons (the node's error codes) after which this token is done. */
const SESSION_CODES = new Set([
  "unauthorized",
  "invalid_token",
  "token_expired",
  "token_revoked",
  "removed",
]);
const MAX_DELAY = 15000;

export class Live {
  /**
   * @param {object} hooks
   * @param {() => string} hooks.token
   * @param {(snapshot: object, resumed: boolean) => void} hooks.onSnapshot
   * @param {(event: object) => void} hooks.onEvent every other server event
   * @param {(state: string, seconds?: number) => void} hooks.onStatus
   *   "connecting", "connected", "waiting" (seconds until the next try)
   * @param {(code: string, message: string) => void} hooks.onSessionEnded
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.ws = null;
    this.since = null;
    this.attempts = 0;
    this.stopped = true;
    this.timer = 0;
    this.ticker = 0;
    this.lastError = null;
    this.connectedOnce = false;
    this.onOnline = () => this.reconnectNow();
    this.onVisible = () => {
      if (document.visibilityState === "visible" && this.waiting) this.reconnectNow();
    };
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN && this.authenticated;
  }

  start() {
    this.stopped = false;
    window.addEventListener("online", this.onOnline);
    document.addEventListener("visibilitychange", this.onVisible);
    this.connect();
  }

  stop() {
    this.stopped = true;
    window.removeEventListener("online", this.onOnline);
    document.removeEventListener("visibilitychange", this.onVisible);
    this.clearTimers();
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close(1000, "signed out");
    }
  }

  /** Send a frame if connected; false if it could not be sent. */
  send(frame) {
    if (!this.connected) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  /** Remember the newest message cursor given to the page (for `since`). */
  noteCursor(cursor) {
    if (cursor && (this.since === null || cursorCompare(cursor, this.since) > 0)) {
      this.since = cursor;
    }
  }

  reconnectNow() {
    if (this.stopped || (this.ws && this.ws.readyState <= WebSocket.OPEN)) return;
    this.clearTimers();
    this.connect();
  }

  clearTimers() {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.waiting = false;
  }

  connect() {
    this.hooks.onStatus("connecting");
    this.authenticated = false;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${scheme}//${location.host}/ws`);
    this.ws = ws;
    ws.addEventListener("open", () => {
      const frame = { type: "authenticate", token: this.hooks.token(), autoRead: false };
      if (this.since !== null) frame.since = this.since;
      ws.send(JSON.stringify(frame));
    });
    ws.addEventListener("message", (event) => {
      if (ws !== this.ws) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.receive(frame);
    });
    ws.addEventListener("close", (event) => {
      if (ws !== this.ws) return;
      this.ws = null;
      this.authenticated = false;
      if (this.stopped) return;
      if (event.code === 1008 && SESSION_CODES.has(event.reason)) {
        this.stopped = true;
        this.hooks.onSessionEnded(event.reason, this.lastError || "");
        return;
      }
      // 1013 "overloaded" (the node is out of connections): back off, not 0.5 s
      this.scheduleReconnect(event.code === 1013 && event.reason !== "overloaded" ? 0.5 : null);
    });
  }

  receive(frame) {
    switch (frame.type) {
      case "auth_ok":
        this.authenticated = true;
        this.attempts = 0;
        this.hooks.onStatus("connected");
        break;
      case "snapshot": {
        const resumed = this.connectedOnce;
        this.connectedOnce = true;
        if (this.since === null) this.since = frame.cursor;
        this.hooks.onSnapshot(frame, resumed);
        break;
      }
      case "message":
        this.noteCursor(frame.cursor);
        this.hooks.onEvent(frame);
        break;
      case "error":
        this.lastError = frame.message;
        this.hooks.onEvent(frame);
        break;
      default:
        this.hooks.onEvent(frame);
    }
  }

  scheduleReconnect(fixed) {
    const base = Math.min(MAX_DELAY, 500 * 2 ** this.attempts);
    const delay = fixed !== null ? fixed * 1000 : base * (0.75 + Math.random() * 0.5);
    this.attempts += 1;
    const due = Date.now() + delay;
    this.waiting = true;
    const tick = () => {
      this.hooks.onStatus("waiting", Math.max(0, Math.ceil((due - Date.now()) / 1000)));
    };
    tick();
    this.ticker = setInterval(tick, 1000);
    this.timer = setTimeout(() => {
      this.clearTimers();
      this.connect();
    }, delay);
  }
}
