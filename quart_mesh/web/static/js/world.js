// The World view (#world): every room as a region of a 2D map, everyone who
// has a position drawn in it, and you moving yourself (drag, tap, or the
// arrow keys). Beside the map, a text alternative: who is where, as tables.
//
// How it is drawn and why (a canvas, a dirty flag, batched paths, a throttle
// for `move` frames): docs/decisions/0049-world-view.md.

import { bdi, fill, h, isBot, shortDid } from "./dom.js";
import { Panel, errorLine, field, statusLine } from "./view.js";

/** A room's region spans -EXTENT..EXTENT in x and z (world units). Positions
 * beyond are drawn at the edge; your own moves stay inside. */
export const EXTENT = 10;
/** One arrow key press moves this far (Shift: four times as far). */
const STEP = 0.5;
/** At most one `move` frame per this many ms; the last position is always sent. */
const MOVE_EVERY = 100;
/** The text alternative is rebuilt at most this often (ms). */
const LIST_EVERY = 500;
/** A region's label band, CSS pixels. */
const LABEL = 22;
/** Names are drawn for everyone in a room with at most this many people
 * (fewer in small regions: one per 40 px of width). */
const NAMES_UP_TO = 12;
const KEYS = {
  ArrowLeft: [-1, 0],
  ArrowRight: [1, 0],
  ArrowUp: [0, -1],
  ArrowDown: [0, 1],
};

const clamp = (value, low, high) => Math.min(high, Math.max(low, value));
const fmt = (n) => (Math.round(n * 10) / 10).toFixed(1);

/** What a participant is, in words (the text alternative, the legend). */
export function kindOf(p) {
  if (p.type === "guest") return "guest";
  return isBot(p) ? `bot (${p.type})` : "human";
}

export class WorldPanel extends Panel {
  constructor(app) {
    super(app);
    this.reset();
  }

  reset() {
    this.canvas = null;
    this.ctx = null;
    this.frame = 0; // the pending animation frame
    this.dirty = false;
    this.layout = null; // {cols, cell, width, height, regions: Map(roomId -> region)}
    this.colors = null;
    this.mine = null; // your position as shown: {roomId, x, y, z}
    this.sent = null; // the last position sent
    this.sentAt = 0;
    this.moveTimer = 0;
    this.movedAt = 0; // when you last moved here (keys, drag)
    this.dragging = null; // {pointerId}
    this.hover = null; // participantId under the pointer
    this.selectedRoomId = null;
    this.listTimer = 0;
    this.listAt = 0;
    this.announceTimer = 0;
    this.observer = null;
    this.media = null;
    this.draws = 0;
    this.cleanup = [];
    this.tables = new Map(); // group key -> {wrap, title, size, tbody}
    this.rows = new Map(); // participantId -> the row's nodes
  }

  // showing and leaving -------------------------------------------------------------

  show(body) {
    this.reset();
    const { store } = this.app;
    const me = store.participant(store.me.participantId);
    this.mine = me && me.position ? { ...me.position } : null;

    this.roomSelect = h("select", { on: { change: () => this.pickRoom(this.roomSelect.value) } });
    this.where = statusLine();
    this.where.classList.add("world-where");
    this.error = errorLine();
    this.canvas = h("canvas", {
      class: "world-map",
      tabindex: "0",
      role: "application",
      "aria-label": "World map",
      "aria-roledescription": "map",
      on: {
        keydown: (e) => this.onKey(e),
        pointerdown: (e) => this.onPointerDown(e),
        pointermove: (e) => this.onPointerMove(e),
        pointerup: (e) => this.onPointerUp(e),
        pointercancel: (e) => this.onPointerUp(e),
        pointerleave: () => this.setHover(null),
        lostpointercapture: (e) => this.onPointerUp(e),
      },
    });
    const hint = h("p", {
      id: "world-map-hint",
      class: "hint",
      text:
        "Arrow keys move you (Shift moves further); " +
        "or drag your marker, or click or tap a place in one of your rooms.",
    });
    this.canvas.setAttribute("aria-describedby", "world-map-hint world-where");
    this.where.id = "world-where";
    this.ctx = this.canvas.getContext("2d", { alpha: false });
    this.frameEl = h("div", { class: "world-frame" }, this.canvas);
    this.list = h("div", { class: "world-list" });
    this.count = h("p", { class: "hint" });

    body.append(
      h(
        "section",
        { class: "world-map-section", "aria-labelledby": "world-map-heading" },
        h("h2", { id: "world-map-heading", text: "Map" }),
        h(
          "div",
          { class: "world-controls" },
          field("Room", this.roomSelect, "The room you move in. Picking another one moves you there."),
          legend(),
        ),
        this.frameEl,
        hint,
        this.where,
        this.error,
      ),
      h(
        "section",
        { class: "world-people", "aria-labelledby": "world-list-heading" },
        h("h2", { id: "world-list-heading", text: "Who is where" }),
        this.count,
        this.list,
      ),
    );

    this.observer = new ResizeObserver(() => this.relayout());
    this.observer.observe(this.frameEl);
    const onViewport = () => this.relayout();
    window.addEventListener("resize", onViewport);
    this.cleanup.push(() => window.removeEventListener("resize", onViewport));
    this.media = window.matchMedia("(prefers-color-scheme: dark)");
    const onTheme = () => {
      this.colors = null;
      this.invalidate();
    };
    this.media.addEventListener("change", onTheme);
    this.cleanup.push(() => this.media.removeEventListener("change", onTheme));

    this.renderRooms();
    this.renderList();
    this.describeMine();
    this.relayout();
    // the snapshot carries the rooms you are in; the map shows the others too
    this.app.api
      .rooms()
      .then((rooms) => {
        if (!this.shown) return;
        for (const data of rooms) this.app.rememberRoom(data);
        this.invalidate(true, true);
      })
      .catch(() => {});
  }

  hide() {
    if (this.frame) cancelAnimationFrame(this.frame);
    if (this.observer) this.observer.disconnect();
    clearTimeout(this.listTimer);
    clearTimeout(this.announceTimer);
    // a move still waiting for its turn is sent now: the node keeps where you stopped
    if (this.moveTimer) {
      clearTimeout(this.moveTimer);
      this.sendMove();
    }
    for (const undo of this.cleanup) undo();
    performance.clearMeasures("mesh:world-draw");
    performance.clearMeasures("mesh:world-list");
    this.reset();
  }

  // live events ---------------------------------------------------------------------

  onEvent(event) {
    if (!this.shown) return;
    const myId = this.app.store.me.participantId;
    switch (event.type) {
      case "participant_moved":
        if (event.participantId === myId) this.reconcile(event);
        this.invalidate(true);
        return;
      case "presence":
        this.invalidate(true);
        return;
      case "participant_joined":
      case "participant_left":
      case "room_deleted":
        // the app updates rooms after this (a room of yours may be fetched first)
        this.invalidate(true, true);
        if (event.participant && event.participant.participantId === myId) {
          setTimeout(() => this.shown && this.invalidate(true, true), 1500);
        }
        return;
      case "error":
        if (event.frame === "move") {
          this.error.textContent = `You could not move: ${event.message}`;
          const me = this.app.store.participant(myId);
          this.mine = me && me.position ? { ...me.position } : null;
          this.sent = null;
          this.invalidate(true);
        }
        return;
      default:
        return;
    }
  }

  onSnapshot() {
    if (!this.shown) return;
    const me = this.app.store.participant(this.app.store.me.participantId);
    if (!this.moveTimer && !this.dragging && me) this.mine = me.position ? { ...me.position } : null;
    this.colors = null;
    this.invalidate(true, true);
  }

  /** Your own `participant_moved`: the node's word, unless you are moving on
   * (an echo of an earlier step would pull the marker back). */
  reconcile(event) {
    const busy = this.moveTimer || this.dragging || performance.now() - this.movedAt < 600;
    if (busy) return;
    this.mine = { roomId: event.roomId, x: event.x, y: event.y, z: event.z };
    if (this.selectedRoomId !== event.roomId && this.isJoined(event.roomId)) {
      this.selectedRoomId = event.roomId;
      this.roomSelect.value = event.roomId;
    }
    this.describeMine();
  }

  // what changed: redraw (next frame), rebuild the list (throttled) ------------------

  /** Draw again on the next animation frame; *list*: the text alternative too;
   * *rooms*: the room choice too. */
  invalidate(list = false, rooms = false) {
    if (!this.canvas) return;
    if (rooms) {
      this.layout = null;
      this.roomsChanged = true;
    }
    this.dirty = true;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.onFrame());
    if (list && !this.listTimer) {
      const wait = Math.max(0, this.listAt + LIST_EVERY - performance.now());
      this.listTimer = setTimeout(() => {
        this.listTimer = 0;
        if (!this.shown) return;
        if (this.roomsChanged) {
          this.roomsChanged = false;
          this.renderRooms();
        }
        const start = performance.now();
        this.renderList();
        performance.measure("mesh:world-list", { start, end: performance.now() });
      }, wait);
    }
  }

  onFrame() {
    this.frame = 0;
    if (!this.dirty || !this.canvas) return;
    this.dirty = false;
    const start = performance.now();
    this.draw();
    performance.measure("mesh:world-draw", { start, end: performance.now() });
    // the timeline keeps measures until cleared: keep it short
    if (++this.draws % 1000 === 0) {
      performance.clearMeasures("mesh:world-draw");
      performance.clearMeasures("mesh:world-list");
    }
  }

  // layout ------------------------------------------------------------------------------

  /** The rooms drawn: every ordinary room the snapshot lists (yours first).
   * Someone standing in a DM is listed under "Elsewhere". */
  rooms() {
    const { store } = this.app;
    const rooms = [...store.rooms.values()].filter((r) => !r.isDm);
    return rooms.sort((a, b) => {
      // the rooms you are in first, each group by name
      if (Boolean(a.joined) !== Boolean(b.joined)) return a.joined ? -1 : 1;
      return a.name.localeCompare(b.name, undefined, { sensitivity: "base" });
    });
  }

  isJoined(roomId) {
    const room = this.app.store.rooms.get(roomId);
    return Boolean(room && room.joined);
  }

  /** The frame or the window changed size: lay out again if it matters. */
  relayout() {
    const key = `${this.frameEl.clientWidth}x${window.innerHeight}@${window.devicePixelRatio}`;
    if (key === this.sizeKey && this.layout) return;
    this.sizeKey = key;
    this.layout = null;
    this.invalidate();
  }

  /** Where each room's region is: a grid of squares as large as fits the
   * frame's width and at most about two thirds of the window's height. */
  computeLayout() {
    const rooms = this.rooms();
    const width = Math.max(120, Math.floor(this.frameEl.clientWidth));
    const maxHeight = Math.max(240, Math.floor(window.innerHeight * 0.66));
    const n = Math.max(1, rooms.length);
    let best = { cols: 1, cell: 0 };
    for (let cols = 1; cols <= n; cols++) {
      const rows = Math.ceil(n / cols);
      const cell = Math.min(width / cols, maxHeight / rows - LABEL, 520);
      if (cell > best.cell + 0.5) best = { cols, cell };
    }
    const { cols } = best;
    const cell = Math.floor(best.cell);
    const rows = Math.ceil(n / cols);
    const regions = new Map();
    const left = Math.floor((width - cols * cell) / 2);
    rooms.forEach((room, i) => {
      const col = i % cols;
      const row = Math.floor(i / cols);
      const x = left + col * cell;
      const y = row * (cell + LABEL);
      // the square inside, under the label
      const pad = 6;
      const side = cell - 2 * pad;
      regions.set(room.roomId, { room, x, y, w: cell, h: cell + LABEL, ix: x + pad, iy: y + LABEL, side });
    });
    const height = rows * (cell + LABEL);
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.layout = { cols, cell, width, height, dpr, regions };
    return this.layout;
  }

  /** CSS pixels of a world position inside its room's region (null: no region). */
  toScreen(position) {
    const region = this.layout.regions.get(position.roomId);
    if (!region) return null;
    const half = region.side / 2;
    return {
      x: region.ix + half + (clamp(position.x, -EXTENT, EXTENT) / EXTENT) * (half - 4),
      y: region.iy + half + (clamp(position.z, -EXTENT, EXTENT) / EXTENT) * (half - 4),
      region,
    };
  }

  /** The room and world position under a point of the canvas (CSS pixels). */
  fromScreen(px, py) {
    for (const region of this.layout.regions.values()) {
      if (px < region.x || px >= region.x + region.w || py < region.y || py >= region.y + region.h) continue;
      const half = region.side / 2;
      const x = ((px - region.ix - half) / (half - 4)) * EXTENT;
      const z = ((py - region.iy - half) / (half - 4)) * EXTENT;
      return { roomId: region.room.roomId, x: clamp(x, -EXTENT, EXTENT), z: clamp(z, -EXTENT, EXTENT) };
    }
    return null;
  }

  readColors() {
    const css = getComputedStyle(this.canvas);
    const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    this.colors = {
      bg: v("--bg", "#fff"),
      soft: v("--bg-soft", "#f4f5f7"),
      fg: v("--fg", "#1d1f24"),
      fgSoft: v("--fg-soft", "#5b6170"),
      border: v("--border", "#d5d8e0"),
      accent: v("--accent", "#2456c7"),
      accentSoft: v("--accent-soft", "#e5ecfb"),
      human: v("--world-human", "#1f8a3b"),
      bot: v("--world-bot", "#b4540a"),
      federated: v("--world-federated", "#7b3fc4"),
      font: css.fontFamily || "sans-serif",
    };
    return this.colors;
  }

  // drawing -----------------------------------------------------------------------------

  draw() {
    const layout = this.layout || this.computeLayout();
    const colors = this.colors || this.readColors();
    const { ctx } = this;
    const { store } = this.app;
    const myId = store.me.participantId;
    ctx.setTransform(layout.dpr, 0, 0, layout.dpr, 0, 0);
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, layout.width, layout.height);

    // the regions
    ctx.font = `600 13px ${colors.font}`;
    ctx.textBaseline = "middle";
    const counts = new Map();
    for (const p of store.participants.values()) {
      const pos = p.participantId === myId ? this.mine : p.position;
      if (pos) counts.set(pos.roomId, (counts.get(pos.roomId) || 0) + 1);
    }
    for (const region of layout.regions.values()) {
      const { room } = region;
      const selected = room.roomId === this.selectedRoomId;
      ctx.fillStyle = selected ? colors.accentSoft : room.joined ? colors.soft : colors.bg;
      ctx.fillRect(region.ix, region.iy, region.side, region.side);
      ctx.lineWidth = selected ? 2 : 1;
      ctx.strokeStyle = selected ? colors.accent : colors.border;
      if (!room.joined) ctx.setLineDash([4, 4]);
      ctx.strokeRect(region.ix + 0.5, region.iy + 0.5, region.side - 1, region.side - 1);
      ctx.setLineDash([]);
      ctx.fillStyle = room.joined ? colors.fg : colors.fgSoft;
      const here = counts.get(room.roomId) || 0;
      const label = `${room.name}${here ? ` · ${here}` : ""}`;
      ctx.fillText(label, region.ix + 2, region.y + LABEL / 2 + 1, region.side - 4);
    }

    // everyone: one path per look (filled, hollow, ringed), so 500 markers
    // cost a handful of fills and strokes
    const r = layout.cell < 200 ? 3.5 : 5;
    const paths = {
      humanOn: new Path2D(),
      humanOff: new Path2D(),
      botOn: new Path2D(),
      botOff: new Path2D(),
      ring: new Path2D(),
    };
    const named = [];
    const namesUpTo = Math.min(NAMES_UP_TO, Math.floor(layout.cell / 40));
    let meAt = null;
    for (const p of store.participants.values()) {
      const mine = p.participantId === myId;
      const pos = mine ? this.mine || this.unplaced() : p.position;
      if (!pos) continue;
      const at = this.toScreen(pos);
      if (!at) continue;
      if (mine) {
        meAt = at;
        continue;
      }
      const bot = isBot(p);
      const path = bot ? (p.online ? paths.botOn : paths.botOff) : p.online ? paths.humanOn : paths.humanOff;
      if (bot) diamond(path, at.x, at.y, r + 1);
      else circle(path, at.x, at.y, r);
      if (p.trustLevel === "federated") circle(paths.ring, at.x, at.y, r + 3);
      if (p.participantId === this.hover || (counts.get(pos.roomId) || 0) <= namesUpTo) named.push([p, at]);
    }
    ctx.lineWidth = 1.5;
    ctx.fillStyle = colors.human;
    ctx.fill(paths.humanOn);
    ctx.fillStyle = colors.bot;
    ctx.fill(paths.botOn);
    ctx.globalAlpha = 0.75;
    ctx.fillStyle = colors.bg;
    ctx.fill(paths.humanOff);
    ctx.fill(paths.botOff);
    ctx.strokeStyle = colors.human;
    ctx.stroke(paths.humanOff);
    ctx.strokeStyle = colors.bot;
    ctx.stroke(paths.botOff);
    ctx.globalAlpha = 1;
    ctx.strokeStyle = colors.federated;
    ctx.setLineDash([2, 2]);
    ctx.stroke(paths.ring);
    ctx.setLineDash([]);

    // names: where few are (fewer in small regions), and whoever the pointer
    // is on; turned to the left of the marker near the region's right edge
    ctx.font = `12px ${colors.font}`;
    ctx.textBaseline = "bottom";
    ctx.fillStyle = colors.fgSoft;
    for (const [p, at] of named) {
      const room = at.region;
      const width = Math.min(ctx.measureText(p.name).width, room.side / 2);
      const right = at.x + r + 2 + width <= room.ix + room.side - 2;
      ctx.fillText(p.name, right ? at.x + r + 2 : at.x - r - 2 - width, at.y - 2, room.side / 2);
    }

    // you, on top (dashed where the first move would put you, while you have no place)
    if (meAt) {
      const placed = Boolean(this.mine);
      const big = r + 3;
      ctx.beginPath();
      ctx.arc(meAt.x, meAt.y, big + 3, 0, Math.PI * 2);
      ctx.fillStyle = colors.bg;
      ctx.fill();
      ctx.beginPath();
      ctx.arc(meAt.x, meAt.y, big, 0, Math.PI * 2);
      if (placed) {
        ctx.fillStyle = colors.accent;
        ctx.fill();
        ctx.lineWidth = 2;
        ctx.strokeStyle = colors.fg;
      } else {
        ctx.lineWidth = 2.5;
        ctx.setLineDash([3, 2]);
        ctx.strokeStyle = colors.accent;
      }
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.font = `600 12px ${colors.font}`;
      ctx.fillStyle = colors.fg;
      ctx.fillText(placed ? "You" : "You (no place yet)", meAt.x + big + 3, meAt.y - 3);
    }
  }

  // the text alternative -------------------------------------------------------------

  renderRooms() {
    const joined = this.rooms().filter((r) => r.joined);
    const { roomSelect } = this;
    const current = this.selectedRoomId;
    let pick = current && joined.some((r) => r.roomId === current) ? current : null;
    if (!pick && this.mine && joined.some((r) => r.roomId === this.mine.roomId)) pick = this.mine.roomId;
    const fallback = this.app.store.status && this.app.store.status.defaultRoomId;
    if (!pick && joined.some((r) => r.roomId === fallback)) pick = fallback;
    if (!pick && joined.length) pick = joined[0].roomId;
    fill(
      roomSelect,
      joined.length ? null : h("option", { value: "", text: "You are in no room" }),
      joined.map((room) => h("option", { value: room.roomId, text: room.name })),
    );
    roomSelect.disabled = joined.length === 0;
    this.selectedRoomId = pick;
    if (pick) roomSelect.value = pick;
    if (!this.mine) this.describeMine();
  }

  /** Bring the text alternative up to date. Rows and tables are kept and
   * changed in place (a screen reader's place in the list survives, and 500
   * rows cost little when a few changed). */
  renderList() {
    this.listAt = performance.now();
    const { store } = this.app;
    const myId = store.me.participantId;
    const rooms = this.rooms();
    const byRoom = new Map(rooms.map((r) => [r.roomId, []]));
    const elsewhere = [];
    const nowhere = [];
    for (const p of store.participants.values()) {
      const pos = p.participantId === myId ? this.mine : p.position;
      if (!pos) nowhere.push([p, null]);
      else if (byRoom.has(pos.roomId)) byRoom.get(pos.roomId).push([p, pos]);
      else elsewhere.push([p, pos]);
    }
    const byName = (a, b) => COLLATOR.compare(a[0].name, b[0].name);
    const groups = [];
    for (const room of rooms) {
      const people = byRoom.get(room.roomId);
      if (people.length) groups.push([`room:${room.roomId}`, room.name, people.sort(byName)]);
    }
    if (elsewhere.length) groups.push(["elsewhere", "Elsewhere (rooms you cannot see)", elsewhere.sort(byName)]);
    if (nowhere.length) groups.push(["nowhere", "Not placed yet", nowhere.sort(byName)]);
    const placed = store.participants.size - nowhere.length;
    setText(this.count, `${placed} of ${store.participants.size} participants have a place.`);

    const seenGroups = new Set();
    const seenRows = new Set();
    groups.forEach(([key, title, people], at) => {
      seenGroups.add(key);
      let group = this.tables.get(key);
      if (!group) {
        group = this.newTable();
        this.tables.set(key, group);
      }
      setText(group.title, title);
      setText(group.size, ` (${people.length})`);
      placeAt(this.list, group.wrap, at);
      people.forEach(([p, pos], i) => {
        seenRows.add(p.participantId);
        let row = this.rows.get(p.participantId);
        if (!row) {
          row = newRow();
          this.rows.set(p.participantId, row);
        }
        fillRow(row, p, pos, p.participantId === myId);
        placeAt(group.tbody, row.tr, i);
      });
    });
    for (const [key, group] of this.tables) {
      if (!seenGroups.has(key)) {
        group.wrap.remove();
        this.tables.delete(key);
      }
    }
    for (const [id, row] of this.rows) {
      if (!seenRows.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
  }

  newTable() {
    const title = bdi("");
    const size = document.createTextNode("");
    const tbody = h("tbody");
    const wrap = h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "records world-table" },
        h("caption", {}, title, size),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Name", "Kind", "Status", "Position"].map((text) => h("th", { scope: "col", text })),
          ),
        ),
        tbody,
      ),
    );
    return { wrap, title, size, tbody };
  }

  /** Where you are drawn while you have no place: the middle of the room
   * picked under Room, where the first arrow key puts you (null: no room). */
  unplaced() {
    const roomId = this.selectedRoomId;
    return roomId && this.isJoined(roomId) ? { roomId, x: 0, y: 0, z: 0 } : null;
  }

  /** Say where you are (the status line under the map). */
  describeMine() {
    if (!this.where) return;
    const mine = this.mine;
    const room = mine && this.app.store.rooms.get(mine.roomId);
    if (!mine) {
      const shown = this.unplaced();
      const at = shown && this.app.store.rooms.get(shown.roomId);
      this.where.textContent = at
        ? `You have no place yet: you are shown in the middle of ${at.name}. Press an arrow key on the map, or click in a room, to take a place.`
        : "You have no place yet: press an arrow key on the map, or click in a room.";
      return;
    }
    const name = room ? room.name : "a room you cannot see";
    this.where.textContent = `You are in ${name} at x ${fmt(mine.x)}, z ${fmt(mine.z)}.`;
  }

  // moving yourself -----------------------------------------------------------------

  /** Put yourself at *position* here at once and send it (throttled). */
  moveTo(position) {
    this.error.textContent = "";
    this.mine = { y: 0, ...position };
    this.movedAt = performance.now();
    const me = this.app.store.participant(this.app.store.me.participantId);
    if (me) me.position = { ...this.mine };
    this.invalidate(true);
    this.queueMove();
    clearTimeout(this.announceTimer);
    this.announceTimer = setTimeout(() => this.describeMine(), 300);
  }

  queueMove() {
    if (this.moveTimer) return; // the timer sends the newest position
    const wait = this.sentAt + MOVE_EVERY - performance.now();
    if (wait <= 0) this.sendMove();
    else this.moveTimer = setTimeout(() => this.sendMove(), wait);
  }

  sendMove() {
    this.moveTimer = 0;
    const mine = this.mine;
    if (!mine) return;
    const s = this.sent;
    if (s && s.roomId === mine.roomId && s.x === mine.x && s.y === mine.y && s.z === mine.z) return;
    const frame = { type: "move", roomId: mine.roomId, x: mine.x, y: mine.y, z: mine.z };
    const live = this.app.live;
    if (!live || !live.send(frame)) {
      if (this.error) this.error.textContent = "Not connected: your place is sent when the connection is back.";
      // try again shortly (the connection is being restored)
      this.moveTimer = setTimeout(() => this.sendMove(), 1000);
      return;
    }
    if (this.error && this.error.textContent.startsWith("Not connected")) this.error.textContent = "";
    this.sent = { ...mine };
    this.sentAt = performance.now();
  }

  pickRoom(roomId) {
    if (!roomId) return;
    this.selectedRoomId = roomId;
    if (!this.mine || this.mine.roomId !== roomId) {
      const x = this.mine ? this.mine.x : 0;
      const z = this.mine ? this.mine.z : 0;
      this.moveTo({ roomId, x, y: this.mine ? this.mine.y : 0, z });
    }
    this.invalidate();
  }

  onKey(event) {
    const delta = KEYS[event.key];
    if (!delta || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    const roomId = this.selectedRoomId;
    if (!roomId) {
      this.error.textContent = "Join a room first: you can only move in rooms you are in.";
      return;
    }
    const step = event.shiftKey ? STEP * 4 : STEP;
    const from = this.mine && this.mine.roomId === roomId ? this.mine : { roomId, x: 0, y: 0, z: 0 };
    const fresh = !this.mine || this.mine.roomId !== roomId;
    this.moveTo({
      roomId,
      x: fresh ? 0 : clamp(from.x + delta[0] * step, -EXTENT, EXTENT),
      y: from.y || 0,
      z: fresh ? 0 : clamp(from.z + delta[1] * step, -EXTENT, EXTENT),
    });
  }

  point(event) {
    const rect = this.canvas.getBoundingClientRect();
    return [event.clientX - rect.left, event.clientY - rect.top];
  }

  onPointerDown(event) {
    if (event.button !== 0 || !this.layout) return;
    const [px, py] = this.point(event);
    const at = this.fromScreen(px, py);
    if (!at) return;
    if (!this.isJoined(at.roomId)) {
      const room = this.app.store.rooms.get(at.roomId);
      this.error.textContent = `You are not in ${room ? room.name : "that room"}: join it to move there.`;
      return;
    }
    event.preventDefault();
    this.canvas.focus();
    this.canvas.setPointerCapture(event.pointerId);
    this.dragging = { pointerId: event.pointerId };
    this.follow(at);
  }

  onPointerMove(event) {
    if (!this.layout) return;
    const [px, py] = this.point(event);
    if (this.dragging && this.dragging.pointerId === event.pointerId) {
      const at = this.fromScreen(px, py);
      if (at && this.isJoined(at.roomId)) this.follow(at);
      return;
    }
    if (event.pointerType === "mouse") this.setHover(this.nearest(px, py));
  }

  onPointerUp(event) {
    if (!this.dragging || this.dragging.pointerId !== event.pointerId) return;
    this.dragging = null;
    this.movedAt = performance.now();
    this.queueMove(); // the last place is sent (throttled at most once more)
    clearTimeout(this.announceTimer);
    this.describeMine();
  }

  follow(at) {
    if (this.selectedRoomId !== at.roomId) {
      this.selectedRoomId = at.roomId;
      this.roomSelect.value = at.roomId;
    }
    this.moveTo({ roomId: at.roomId, x: at.x, y: this.mine ? this.mine.y : 0, z: at.z });
  }

  /** The participant drawn nearest to a point (within 12 px), for its name. */
  nearest(px, py) {
    let best = null;
    let bestD = 144;
    for (const p of this.app.store.participants.values()) {
      if (!p.position) continue;
      const at = this.toScreen(p.position);
      if (!at) continue;
      const d = (at.x - px) ** 2 + (at.y - py) ** 2;
      if (d < bestD) {
        bestD = d;
        best = p.participantId;
      }
    }
    return best;
  }

  setHover(participantId) {
    if (participantId === this.hover) return;
    this.hover = participantId;
    this.invalidate();
  }
}

const COLLATOR = new Intl.Collator(undefined, { sensitivity: "base" });

/** Set a node's text only when it differs (no needless mutation). */
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/** Put *child* at index *i* of *parent*, moving it only if it is elsewhere. */
function placeAt(parent, child, i) {
  const there = parent.children[i];
  if (there !== child) parent.insertBefore(child, there || null);
}

/** A row of the text alternative: name (a row header), kind, status, position. */
function newRow() {
  const name = bdi("");
  const you = document.createTextNode("");
  const kind = document.createTextNode("");
  const origin = h("span", { class: "world-origin" });
  const status = h("td");
  const x = h("span", { class: "coord" });
  const z = h("span", { class: "coord" });
  const position = h("td", {}, x, " ", z);
  const kindCell = h("td", {}, kind, origin);
  const tr = h("tr", {}, h("th", { scope: "row" }, name, you), kindCell, status, position);
  return { tr, name, you, kind, kindCell, origin, status, x, z, key: "" };
}

function fillRow(row, p, pos, you) {
  const federated = p.trustLevel === "federated";
  const shown = [p.name, you, kindOf(p), federated && p.origin, p.online, pos && fmt(pos.x), pos && fmt(pos.z)];
  const key = shown.join("\u0000");
  if (key === row.key) return;
  row.key = key;
  row.tr.classList.toggle("you", you);
  setText(row.name, p.name);
  setText(row.you, you ? " (you)" : "");
  setText(row.kind, kindOf(p));
  setText(row.origin, federated ? `federated · ${shortDid(p.origin)}` : "");
  row.origin.hidden = !federated;
  if (federated) row.kindCell.title = `from another mesh: ${p.origin}`;
  else row.kindCell.removeAttribute("title");
  row.status.className = p.online ? "on" : "off";
  setText(row.status, p.online ? "online" : "offline");
  setText(row.x, pos ? `x ${fmt(pos.x)},` : "—");
  setText(row.z, pos ? `z ${fmt(pos.z)}` : "");
}

function circle(path, x, y, r) {
  path.moveTo(x + r, y);
  path.arc(x, y, r, 0, Math.PI * 2);
}

function diamond(path, x, y, r) {
  path.moveTo(x, y - r);
  path.lineTo(x + r, y);
  path.lineTo(x, y + r);
  path.lineTo(x - r, y);
  path.closePath();
}

/** What the shapes mean (the same shapes, drawn by CSS). */
function legend() {
  const item = (shape, text) => h("li", {}, h("span", { class: `world-shape ${shape}`, "aria-hidden": "true" }), text);
  return h(
    "ul",
    { class: "world-legend", "aria-label": "Legend" },
    item("you", "you"),
    item("human", "human"),
    item("bot", "bot"),
    item("offline", "offline (hollow)"),
    item("federated", "from another mesh (ring)"),
  );
}
