// What the page knows: rooms, participants, the messages loaded per room,
// unread counts, and the messages on their way out. Views read it; the app
// changes it from REST answers and live events.

import { cursorCompare, mentions } from "./dom.js";

/** One room or DM as the page sees it. */
export class Room {
  constructor(data) {
    this.roomId = data.roomId;
    this.messages = new Map(); // messageId -> message
    this.sortedCache = null;
    this.loaded = false; // the newest page has been fetched
    this.hasOlder = true;
    this.loadingOlder = false;
    this.permissions = null; // from GET /api/rooms/:id
    this.members = null;
    this.unread = 0;
    this.mentions = 0;
    this.markedRead = "0"; // newest cursor sent as mark_read
    this.seenCursor = "0"; // newest cursor the person has seen here
    this.muted = false; // the person muted it (stored on the node)
    // shown around an older message (a jump): newer pages not loaded yet, and
    // the live messages held until they are
    this.hasNewer = false;
    this.loadingNewer = false;
    this.held = [];
    this.update(data);
  }

  update(data) {
    for (const key of ["kind", "name", "description", "memberCount", "createdBy", "origin"]) {
      if (data[key] !== undefined) this[key] = data[key];
    }
    if (data.joined !== undefined) this.joined = data.joined;
    if (data.with !== undefined) this.with = data.with;
    if (data.muted !== undefined && data.muted !== null) this.muted = Boolean(data.muted);
  }

  get isDm() {
    return this.kind === "dm";
  }

  /** Loaded messages, oldest first. */
  get sorted() {
    if (this.sortedCache === null) {
      this.sortedCache = [...this.messages.values()].sort((a, b) => cursorCompare(a.cursor, b.cursor));
    }
    return this.sortedCache;
  }

  /** The person has seen messages here the node does not count as read at
   * *cursor* (a mark of theirs is on its way). Not when every message between
   * is gone (deleted): then the node's position is as far as it can go. */
  isAheadOf(cursor) {
    if (cursorCompare(this.seenCursor, cursor) <= 0) return false;
    return this.sorted.some(
      (m) => cursorCompare(m.cursor, cursor) > 0 && cursorCompare(m.cursor, this.seenCursor) <= 0,
    );
  }

  get newestCursor() {
    const list = this.sorted;
    return list.length ? list[list.length - 1].cursor : null;
  }

  get oldestCursor() {
    const list = this.sorted;
    return list.length ? list[0].cursor : null;
  }

  put(message) {
    const isNew = !this.messages.has(message.messageId);
    this.messages.set(message.messageId, message);
    this.sortedCache = null;
    return isNew;
  }

  /** A loaded or held message. */
  find(messageId) {
    return this.messages.get(messageId) || this.held.find((m) => m.messageId === messageId) || null;
  }

  /** Hold a live message of a room shown away from its newest (a jump), in
   * place of an older copy; at most *max*, the oldest go first. */
  hold(message, max) {
    this.held = this.held.filter((m) => m.messageId !== message.messageId);
    this.held.push(message);
    if (this.held.length > max) this.held.splice(0, this.held.length - max);
  }

  /** Keep a message fetched aside (a thread's page): one newer than what a
   * jump loaded (or any, while its page is on its way) waits with the held
   * ones, so no gap opens before the newer pages come. */
  keep(message, max) {
    const newest = this.newestCursor;
    if (this.hasNewer && !this.messages.has(message.messageId) && (!newest || cursorCompare(message.cursor, newest) > 0)) {
      this.hold(message, max);
    } else {
      this.put(message);
    }
  }

  drop(messageId) {
    const had = this.messages.delete(messageId);
    if (had) this.sortedCache = null;
    return had;
  }

  forgetMessages() {
    this.messages.clear();
    this.sortedCache = null;
    this.loaded = false;
    this.hasOlder = true;
    this.hasNewer = false;
    this.held = [];
  }
}

/** Everything the page holds for the signed-in participant. */
export class Store {
  constructor() {
    this.me = null; // GET /api/auth/me
    this.status = null; // GET /api/setup/status
    this.rooms = new Map();
    this.participants = new Map();
    // live messages counted as unread since the last status fetch:
    // [{roomId, cursor, mention}], kept short
    this.counted = [];
    this.statusCursor = null; // the node's newest cursor when the last status was read
  }

  can(permission) {
    return Boolean(this.me && this.me.permissions.includes(permission));
  }

  /** Replace rooms and participants from a snapshot, keeping what the page
   * loaded for rooms that still exist. */
  applySnapshot(snapshot) {
    const seen = new Set();
    for (const data of snapshot.rooms) {
      seen.add(data.roomId);
      const room = this.rooms.get(data.roomId);
      if (room) room.update(data);
      else this.rooms.set(data.roomId, new Room(data));
    }
    for (const roomId of [...this.rooms.keys()]) {
      const room = this.rooms.get(roomId);
      // hidden DMs are not in the snapshot but still ours
      if (!seen.has(roomId) && !(room.isDm && room.joined)) this.rooms.delete(roomId);
    }
    this.participants.clear();
    for (const p of snapshot.participants) this.participants.set(p.participantId, p);
  }

  joinedRooms() {
    return [...this.rooms.values()]
      .filter((r) => !r.isDm && r.joined)
      .sort((a, b) => a.name.localeCompare(b.name, undefined, { sensitivity: "base" }));
  }

  dms() {
    return [...this.rooms.values()].filter((r) => r.isDm && r.joined && !r.hidden);
  }

  participant(id) {
    return this.participants.get(id) || null;
  }

  nameOf(id) {
    const p = this.participants.get(id);
    return p ? p.name : "someone";
  }

  /** The display name of a room: a DM is named after the other person. */
  roomLabel(room) {
    if (!room.isDm) return room.name;
    if (room.with) return this.nameOf(room.with);
    if (room.name == "dm") return "direct message";
    // a group: its members but oneself (the node names it by all of them)
    return room.name.split(", ").filter((n) => n !== this.me?.name).join(", ") || room.name;
  }

  isName(name) {
    const wanted = name.toLowerCase();
    for (const p of this.participants.values()) if (p.name.toLowerCase() === wanted) return true;
    return false;
  }

  mentionsMe(message) {
    return message.to === this.me.participantId || mentions(message.content, this.me.name);
  }

  /** Count a live message from someone else as unread in its room (unless
   * the last `GET /api/status` counted it already: a replayed message). */
  countUnread(room, message) {
    if (this.statusCursor !== null && cursorCompare(message.cursor, this.statusCursor) <= 0) return;
    const mention = this.mentionsMe(message);
    room.unread += 1;
    if (mention) room.mentions += 1;
    this.counted.push({ roomId: room.roomId, cursor: message.cursor, mention });
    if (this.counted.length > 2000) this.counted.splice(0, 1000);
  }

  /** Take `GET /api/status` as the truth, plus live messages counted after
   * the moment it describes. */
  applyStatus(status) {
    const byRoom = new Map(status.rooms.map((r) => [r.roomId, r]));
    // rooms whose read position the page is ahead of (a mark not yet
    // stored, or lost with a connection): their counts stay the page's own
    const ahead = new Set();
    for (const room of this.rooms.values()) {
      const fresh = byRoom.get(room.roomId);
      if (!fresh) {
        if (room.joined) {
          room.unread = 0;
          room.mentions = 0;
        }
        continue;
      }
      const stored = fresh.lastReadCursor || "0";
      room.markedRead = stored; // the node's: a lost mark is sent again (flushReads)
      if (room.isAheadOf(stored)) {
        ahead.add(room.roomId);
        continue;
      }
      room.unread = fresh.unread;
      room.mentions = fresh.mentions;
    }
    for (const item of this.counted) {
      if (cursorCompare(item.cursor, status.cursor) <= 0) continue;
      const room = this.rooms.get(item.roomId);
      if (!room || ahead.has(room.roomId)) continue;
      room.unread += 1;
      if (item.mention) room.mentions += 1;
    }
    this.counted = this.counted.filter((item) => cursorCompare(item.cursor, status.cursor) > 0);
    this.statusCursor = status.cursor;
  }

  /** The unread count of the title and the icon: a muted room's messages
   * count only when they mention the person. */
  totalUnread() {
    let total = 0;
    for (const room of this.rooms.values()) {
      if (room.joined) total += room.muted ? room.mentions : room.unread;
    }
    return total;
  }
}

/**
 * Messages on their way out, sent one at a time in order over REST with a
 * `clientId`, so a retry after a lost answer never makes a second message.
 * A message stays pending until the node's own `message` event (or a page
 * holding it) confirms it; a refusal marks it failed (with the node's
 * reason) for the person to retry or discard; an unreachable node is tried
 * again when the connection is back.
 */
export class Outbox {
  /**
   * @param {(item) => Promise<object>} post sends one item, resolves with the
   *   message (and may confirm the item itself: a message the node already had)
   * @param {() => void} changed called whenever an item changes
   */
  constructor(post, changed) {
    this.post = post;
    this.changed = () => {
      this.save();
      changed();
    };
    this.items = []; // {clientId, roomId, threadId, content, to, attachments, status, error}
    this.running = false;
    this.wake = null;
    this.storageKey = null;
  }

  /** Keep unsent messages in *storageKey* (localStorage), so a reload or a
   * crash of the page loses none; take back what an earlier page left. */
  restore(storageKey) {
    this.storageKey = storageKey;
    let saved = [];
    try {
      saved = JSON.parse(localStorage.getItem(storageKey) || "[]");
    } catch {
      saved = [];
    }
    for (const item of Array.isArray(saved) ? saved : []) {
      if (typeof item.clientId !== "string" || typeof item.content !== "string") continue;
      this.items.push({ ...item, status: item.status === "failed" ? "failed" : "queued" });
    }
    if (this.items.length) {
      this.changed();
      this.pump();
    }
  }

  save() {
    if (!this.storageKey) return;
    const keep = this.items.map(({ clientId, roomId, threadId, content, to, attachments, status, error }) => ({
      clientId,
      roomId,
      threadId,
      content,
      to,
      attachments,
      status,
      error,
    }));
    try {
      if (keep.length) localStorage.setItem(this.storageKey, JSON.stringify(keep));
      else localStorage.removeItem(this.storageKey);
    } catch {
      // storage full or off: the page still holds them
    }
  }

  /** Stop keeping items (another person may sign in next); storage keeps them. */
  detach() {
    this.storageKey = null;
    this.items = [];
  }

  /** Forget every item, here and in storage (signing out). */
  clear() {
    this.items = [];
    if (this.storageKey) localStorage.removeItem(this.storageKey);
    this.storageKey = null;
  }

  add(item) {
    this.items.push({ ...item, status: "queued", error: null });
    this.changed();
    this.pump();
  }

  forRoom(roomId, threadId = undefined) {
    return this.items.filter(
      (i) => i.roomId === roomId && (threadId === undefined || i.threadId === threadId),
    );
  }

  /** The node's message with this clientId arrived: the item is done. */
  confirm(clientId) {
    const before = this.items.length;
    this.items = this.items.filter((i) => i.clientId !== clientId);
    if (this.items.length !== before) this.changed();
  }

  retry(clientId) {
    const item = this.items.find((i) => i.clientId === clientId);
    if (!item) return;
    item.status = "queued";
    item.error = null;
    this.changed();
    this.pump();
  }

  discard(clientId) {
    this.confirm(clientId);
  }

  /** The node may be reachable again: try waiting items now. */
  resume() {
    if (this.wake) this.wake();
  }

  async pump() {
    if (this.running) return;
    this.running = true;
    try {
      let attempt = 0;
      for (;;) {
        const item = this.items.find((i) => i.status === "queued");
        if (!item) break;
        item.status = "sending";
        this.changed();
        try {
          await this.post(item);
          attempt = 0;
          // still shown as pending until its event arrives (confirm)
          if (this.items.includes(item)) {
            item.status = "sent";
            this.changed();
          }
        } catch (error) {
          if (!this.items.includes(item)) continue;
          if (error.transient) {
            item.status = "queued";
            item.error = error.status === 429 ? error.message : null;
            this.changed();
            const wait = error.retryAfter ? error.retryAfter * 1000 : Math.min(15000, 1000 * 2 ** attempt);
            attempt += 1;
            await new Promise((resolve) => {
              const timer = setTimeout(resolve, wait);
              this.wake = () => {
                clearTimeout(timer);
                resolve();
              };
            });
            this.wake = null;
          } else {
            item.status = "failed";
            item.error = error.message;
            item.code = error.code;
            this.changed();
          }
        }
      }
    } finally {
      this.running = false;
    }
  }
}
