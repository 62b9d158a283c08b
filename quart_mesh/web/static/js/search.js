// Search (GET /api/search, docs/rest.md): the field in the top bar (`/` or
// Ctrl/Cmd+K), the filters as chips, and the results grouped by room with
// their matches marked. A result is a link to `#room/<roomId>/message/<id>`:
// Enter or a click opens the message in its room (main.js, jumpTo).
//
// Everything the node sends back (snippets, names) is shown as text: the
// matched ranges are cut out of the snippet's text and wrapped in <mark>.
//
// Fetched the first time the person goes to the search: main.js listens to
// the field and the shortcuts until then, and forwards them (open, schedule,
// run, onFocus).

import { $, bdi, fill, h, icon, shortTime, longTime } from "./dom.js";

const PAGE = 20;
const DEBOUNCE = 250;
const OVERRIDES = /[\u202d\u202e]/g;

/** The words of a snippet with its highlighted ranges in <mark>: offsets are
 * in code points (Array.from), `end` exclusive; bad ranges are skipped. */
export function highlighted(snippet) {
  const chars = Array.from(String(snippet.text || "").replace(OVERRIDES, "\ufffd"));
  const ranges = (Array.isArray(snippet.highlights) ? snippet.highlights : [])
    .filter((r) => r && Number.isInteger(r.start) && Number.isInteger(r.end))
    .sort((a, b) => a.start - b.start);
  const out = [];
  let at = 0;
  for (const r of ranges) {
    const start = Math.max(r.start, at);
    const end = Math.min(r.end, chars.length);
    if (end <= start) continue;
    if (start > at) out.push(chars.slice(at, start).join(""));
    out.push(h("mark", { text: chars.slice(start, end).join("") }));
    at = end;
  }
  if (at < chars.length) out.push(chars.slice(at).join(""));
  return out;
}

const TOGGLES = [
  ["inThread", "In threads"],
  ["hasFile", "Has files"],
  ["mentionsMe", "Mentions me"],
];

/** The results panel under the top bar's field (made with this module). */
function makePanel() {
  return h(
    "section",
    { id: "search-panel", class: "search-panel", hidden: true, "aria-labelledby": "search-title" },
    h(
      "div",
      { class: "search-head" },
      h("h2", { id: "search-title", text: "Search" }),
      h("button", { type: "button", id: "close-search", class: "icon-button", "aria-label": "Close search" }, icon("close")),
    ),
    h("div", { id: "search-filters", class: "search-filters", role: "group", "aria-label": "Filters" }),
    h("p", { id: "search-status", class: "search-status", role: "status" }),
    h("div", { id: "search-results", class: "search-results" }),
    h("p", { class: "search-more" }, h("button", { type: "button", id: "search-more", hidden: true, text: "More results" })),
  );
}

export class Search {
  constructor(app) {
    this.app = app;
    this.form = $("search-form");
    this.input = $("search-input");
    this.panel = makePanel();
    this.form.after(this.panel);
    this.input.setAttribute("aria-controls", "search-panel");
    this.timer = 0;
    this.controller = null;
    this.cursor = null;
    this.asked = ""; // the query string of the results shown
    this.filters = { room: "", from: "", after: "", before: "", inThread: false, hasFile: false, mentionsMe: false, sort: "newest" };
    this.hits = [];
    this.kinds = new Map(); // roomId -> "dm" | "room" | null (asked), of rooms the page does not hold

    for (const el of [this.form, this.panel]) {
      el.addEventListener("focusout", (event) => {
        const next = event.relatedTarget;
        if (next && !this.form.contains(next) && !this.panel.contains(next)) this.close(false);
      });
    }
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "ArrowDown") {
        const first = this.panel.querySelector(".search-hit");
        if (first) {
          event.preventDefault();
          first.focus();
        }
      } else if (event.key === "Escape" && !this.panel.hidden) {
        // (the browser would empty the field: closing is enough)
        event.preventDefault();
        this.close(false);
      }
    });
    this.panel.addEventListener("keydown", (event) => this.onPanelKey(event));
    $("close-search").addEventListener("click", () => this.close(true));
    $("search-more").addEventListener("click", () => this.run(true));
    $("search-results").addEventListener("click", (event) => {
      const link = event.target.closest("a.search-hit");
      if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      this.close(false);
      this.app.openMessage(link.dataset.roomId, link.dataset.messageId);
    });
    document.addEventListener("pointerdown", (event) => {
      if (this.panel.hidden) return;
      if (this.panel.contains(event.target) || this.form.contains(event.target)) return;
      this.close(false);
    });
  }

  /** The field got the focus: Tab passing by does not open the panel;
   * coming back to a search does. */
  onFocus() {
    if (this.closing) return; // (closed with the cursor left in the field)
    if (this.input.value.trim() || this.hasFilters) this.open();
  }

  /** In the results: Up and Down go from result to result (and back to the
   * field); Escape closes the search. */
  onPanelKey(event) {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      this.close(true);
      return;
    }
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const hit = event.target.closest && event.target.closest(".search-hit");
    if (!hit) return;
    const all = [...this.panel.querySelectorAll(".search-hit")];
    const index = all.indexOf(hit) + (event.key === "ArrowDown" ? 1 : -1);
    event.preventDefault();
    if (index < 0) this.input.focus();
    else if (index < all.length) all[index].focus();
  }

  open() {
    if (!this.panel.hidden) return;
    this.panel.hidden = false;
    this.renderFilters();
    if (!this.hits.length) this.describe();
  }

  /** Close the results (kept for the next time); *refocus*: back to the field. */
  close(refocus) {
    clearTimeout(this.timer);
    if (this.panel.hidden) return;
    this.panel.hidden = true;
    if (refocus) {
      this.closing = true;
      this.input.focus();
      this.closing = false;
    }
  }

  /** Forget everything (signing out). */
  reset() {
    this.close(false);
    if (this.controller) this.controller.abort();
    this.input.value = "";
    this.filters = { room: "", from: "", after: "", before: "", inThread: false, hasFile: false, mentionsMe: false, sort: "newest" };
    this.hits = [];
    this.asked = "";
    this.kinds.clear();
    fill($("search-results"));
    $("search-status").textContent = "";
    $("search-more").hidden = true;
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.run(), DEBOUNCE);
  }

  get hasFilters() {
    const f = this.filters;
    return Boolean(f.room || f.from || f.after || f.before || f.inThread || f.hasFile || f.mentionsMe);
  }

  /** The query's parameters (without the page's cursor), or null when
   * there is nothing to search for. */
  params() {
    const q = this.input.value.trim();
    if (!q && !this.hasFilters) return null;
    const f = this.filters;
    const p = new URLSearchParams();
    if (q) p.set("q", q);
    if (f.room) p.set("room", f.room);
    if (f.from) p.set("from", f.from);
    if (f.after) p.set("after", f.after);
    if (f.before) p.set("before", f.before);
    if (f.inThread) p.set("in", "thread");
    if (f.hasFile) p.set("has", "file");
    if (f.mentionsMe) p.set("mentions", "me");
    p.set("sort", f.sort);
    p.set("limit", String(PAGE));
    return p;
  }

  describe(text = "Type words to search: \"a phrase\", prefix*, -word to leave out; or pick a filter.") {
    $("search-status").textContent = text;
  }

  /** Search (the first page), or the next page (*more*); *again*: even if
   * the same search is shown (Enter). */
  async run(more = false, again = false) {
    clearTimeout(this.timer);
    const params = this.params();
    if (!params) {
      if (this.controller) this.controller.abort();
      this.hits = [];
      this.asked = "";
      fill($("search-results"));
      $("search-more").hidden = true;
      this.describe();
      return;
    }
    const asked = params.toString();
    if (more && (asked !== this.asked || !this.cursor)) more = false;
    if (!more && !again && asked === this.asked && this.hits.length) return;
    if (more) params.set("cursor", this.cursor);
    if (this.controller) this.controller.abort();
    const controller = new AbortController();
    this.controller = controller;
    $("search-status").textContent = "Searching…";
    this.panel.setAttribute("aria-busy", "true");
    let answer;
    try {
      answer = await this.app.api.request("GET", `/api/search?${params}`, undefined, { signal: controller.signal });
    } catch (error) {
      if (error.name === "AbortError") return;
      if (controller !== this.controller) return;
      this.panel.removeAttribute("aria-busy");
      $("search-status").textContent =
        error.code === "invalid_query" ? `The search was not understood: ${error.message}` : `Search failed: ${error.message}`;
      if (!more) {
        this.hits = [];
        this.asked = "";
        fill($("search-results"));
        $("search-more").hidden = true;
      }
      return;
    }
    if (controller !== this.controller) return;
    this.controller = null;
    this.panel.removeAttribute("aria-busy");
    const results = Array.isArray(answer && answer.results) ? answer.results : [];
    this.hits = more ? this.hits.concat(results) : results;
    this.asked = asked;
    this.cursor = answer && answer.nextCursor ? answer.nextCursor : null;
    this.render(more ? results.length : 0);
  }

  /** The results, grouped by room in the order they came. */
  render(added) {
    const { store } = this.app;
    const groups = new Map();
    for (const hit of this.hits) {
      const m = hit.message;
      if (!m || !m.roomId || !m.messageId) continue;
      if (!groups.has(m.roomId)) groups.set(m.roomId, []);
      groups.get(m.roomId).push(hit);
    }
    const n = this.hits.length;
    let first = null;
    const sections = [...groups].map(([roomId, hits]) => {
      const room = store.rooms.get(roomId);
      if (!room && !this.kinds.has(roomId)) this.learnKind(roomId);
      const headId = `sg-${roomId}`;
      return h(
        "div",
        { class: "search-group", role: "group", "aria-labelledby": headId },
        h("h3", { id: headId }, this.groupTitle(roomId, hits[0].roomName)),
        h(
          "ul",
          {},
          hits.map((hit) => {
            const m = hit.message;
            const snippet = hit.snippet && typeof hit.snippet.text === "string" ? hit.snippet : { text: m.content || "", highlights: [] };
            const link = h(
              "a",
              {
                class: "search-hit",
                href: `#room/${roomId}/message/${encodeURIComponent(m.messageId)}`,
                dataset: { roomId, messageId: m.messageId },
              },
              h(
                "span",
                { class: "hit-head" },
                bdi(m.senderName || store.nameOf(m.senderId), "hit-sender"),
                " ",
                h("time", { datetime: m.timestamp, title: longTime(m.timestamp), text: shortTime(m.timestamp) }),
                m.threadId ? h("span", { class: "hit-thread", text: " · in a thread" }) : null,
                m.attachments && m.attachments.length ? h("span", { class: "hit-thread", text: " · with a file" }) : null,
              ),
              h("span", { class: "hit-text", dir: "auto" }, highlighted(snippet)),
            );
            if (!first) first = link;
            return h("li", {}, link);
          }),
        ),
      );
    });
    fill($("search-results"), sections);
    const more = $("search-more");
    more.hidden = !this.cursor;
    let text;
    if (!n) text = "No messages found.";
    else text = `${n}${this.cursor ? "+" : ""} message${n === 1 ? "" : "s"} found in ${groups.size} conversation${groups.size === 1 ? "" : "s"}. Down arrow to go through them, Enter to open one.`;
    if (added) text = `${added} more. ${text}`;
    $("search-status").textContent = text;
  }

  /** A group's heading: `#name`, or `Direct messages with name` (for a DM,
   * `roomName` is the other person's name); just the name while the kind of
   * a room the page does not hold (a hidden DM) is not known. */
  groupTitle(roomId, roomName) {
    const { store } = this.app;
    const room = store.rooms.get(roomId);
    const kind = room ? room.kind : this.kinds.get(roomId);
    const name = room ? store.roomLabel(room) : roomName || "a conversation";
    if (kind === "dm") return ["Direct messages with ", bdi(name)];
    return [kind ? "#" : "", bdi(name)];
  }

  /** Ask the node what a room of the results is, then name its group so. */
  async learnKind(roomId) {
    this.kinds.set(roomId, null);
    let data;
    try {
      data = await this.app.api.get(`/api/rooms/${encodeURIComponent(roomId)}`);
    } catch {
      return;
    }
    this.kinds.set(roomId, data.kind === "dm" ? "dm" : "room");
    const head = document.getElementById(`sg-${roomId}`);
    const hit = this.hits.find((item) => item.message && item.message.roomId === roomId);
    if (head && hit) fill(head, this.groupTitle(roomId, hit.roomName));
  }

  // filters --------------------------------------------------------------------

  renderFilters() {
    const { store } = this.app;
    const f = this.filters;
    const chip = (id, label, control, active) =>
      h("span", { class: active ? "chip active" : "chip" }, h("label", { for: id, text: label }), control);
    const select = (id, value, options, onChange) => {
      const el = h(
        "select",
        { id, on: { change: () => onChange(el.value) } },
        options.map(([v, text]) => h("option", { value: v, text })),
      );
      el.value = value;
      if (el.value !== value) el.value = "";
      return el;
    };
    const set = (key) => (value) => {
      f[key] = value;
      this.renderFilters();
      this.run();
    };
    const rooms = [...store.joinedRooms().map((r) => [r.roomId, `#${r.name}`]), ...store.dms().map((r) => [r.roomId, `Direct messages with ${store.roomLabel(r)}`])];
    const me = store.me.participantId;
    const people = [...store.participants.values()]
      .sort((a, b) => a.name.localeCompare(b.name, undefined, { sensitivity: "base" }))
      .slice(0, 500)
      .map((p) => [p.participantId, p.participantId === me ? `${p.name} (you)` : p.name]);
    const date = (id, key) => {
      const el = h("input", { id, type: "date", value: f[key], on: { change: () => set(key)(el.value) } });
      return el;
    };
    const toggles = TOGGLES.map(([key, label]) =>
      h("button", {
        type: "button",
        class: f[key] ? "chip toggle active" : "chip toggle",
        "aria-pressed": f[key] ? "true" : "false",
        text: label,
        on: { click: () => set(key)(!f[key]) },
      }),
    );
    const focused = document.activeElement && this.panel.contains(document.activeElement) ? document.activeElement.id || document.activeElement.textContent : null;
    fill(
      $("search-filters"),
      chip("search-room", "Room", select("search-room", f.room, [["", "Any room"], ...rooms], set("room")), f.room),
      chip("search-from", "From", select("search-from", f.from, [["", "Anyone"], ...people], set("from")), f.from),
      chip("search-after", "After", date("search-after", "after"), f.after),
      chip("search-before", "Before", date("search-before", "before"), f.before),
      toggles,
      chip("search-sort", "Sort", select("search-sort", f.sort, [["newest", "Newest first"], ["relevance", "Most relevant"]], set("sort")), false),
      this.hasFilters
        ? h("button", {
            type: "button",
            class: "link clear-filters",
            text: "Clear filters",
            on: {
              click: () => {
                Object.assign(f, { room: "", from: "", after: "", before: "", inThread: false, hasFile: false, mentionsMe: false });
                this.renderFilters();
                this.run();
                this.input.focus();
              },
            },
          })
        : null,
    );
    // a redraw keeps the focus on the same control
    if (focused) {
      const twin = $(focused) || [...this.panel.querySelectorAll("#search-filters button")].find((b) => b.textContent === focused);
      if (twin) twin.focus();
      else this.input.focus();
    }
  }
}
