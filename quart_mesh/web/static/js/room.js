// A timeline of messages (the room view and the thread panel): messages as
// text with the safe Markdown subset, attachments, reactions, actions, and
// the person's own messages while they are pending or failed.

import { bdi, cursorCompare, formatBytes, h, icon, longTime, shortTime } from "./dom.js";
import { render } from "./markdown.js";
import { run } from "./roomtools.js";
import { participantBadges } from "./sidebar.js";

// the edit form and the reaction picker (msgtools.js), fetched when first used
let tools = null;

export const QUICK_REACTIONS = ["👍", "❤️", "😂", "🎉", "👀", "🙏", "✅", "🚀"];
const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"]);
const NEAR_BOTTOM = 80;
const NEAR_TOP = 150;
// focusable in a message: tab stops in the focused one only
const CONTROLS = "a[href], button, textarea, input, select";

/** Initials on a colour from the id (decorative: the name says it). */
export function avatar(id, name) {
  const [a, b] = name.split(/[\s._-]+/).filter(Boolean);
  const el = h("span", { class: "avatar", "aria-hidden": "true", text: (b ? [...a][0] + [...b][0] : [...name].slice(0, 2).join("")).toUpperCase() });
  let hue = 0;
  for (const ch of id) hue = (hue * 31 + ch.charCodeAt(0)) % 360;
  el.style.background = `hsl(${hue} 50% 32%)`;
  return el;
}

/** "Today", "Yesterday", "Monday, November 23" (the year when not this one). */
function dayLabel(date) {
  const now = new Date();
  const days = Math.round((new Date(now.toDateString()) - new Date(date.toDateString())) / 864e5);
  if (days < 2) return days ? "Yesterday" : "Today";
  const year = date.getFullYear() !== now.getFullYear() && "numeric";
  return date.toLocaleDateString(undefined, { weekday: "long", day: "numeric", month: "long", year: year || undefined });
}

/** Attachments: raster images inline (opening the viewer), anything else as a download link. */
function attachmentsView(message) {
  const items = (message.attachments || []).filter((a) => typeof a.url === "string" && a.url.startsWith("/uploads/"));
  if (!items.length) return null;
  return h(
    "ul",
    { class: "attachments", "aria-label": "Attachments" },
    items.map((a) => {
      if (INLINE_IMAGES.has(a.contentType)) {
        return h(
          "li",
          { class: "attachment image" },
          h(
            "a",
            { href: a.url, title: `${a.filename} (${formatBytes(a.size)})`, "aria-haspopup": "dialog" },
            h("img", { src: a.url, alt: a.filename, loading: "lazy", decoding: "async" }),
          ),
        );
      }
      return h(
        "li",
        { class: "attachment file" },
        h(
          "a",
          { href: a.url, download: a.filename, rel: "noopener noreferrer" },
          icon("file"),
          bdi(a.filename),
          ` (${formatBytes(a.size)})`,
        ),
      );
    }),
  );
}

/** What has the focus inside *root*, to find its twin after a redraw. */
function focusKey(root) {
  const el = document.activeElement;
  if (!el || !root.contains(el)) return null;
  if (el === root) return { self: true };
  return { tag: el.tagName, label: el.getAttribute("aria-label") || el.textContent };
}

function refocus(root, key) {
  if (!key) return;
  if (key.self) {
    root.focus();
    return;
  }
  const twin = [...root.querySelectorAll(key.tag)].find(
    (el) => (el.getAttribute("aria-label") || el.textContent) === key.label,
  );
  (twin || root).focus();
}

export class Timeline {
  /**
   * @param {object} app
   * @param {object} els {scroll, list, status, jump?}
   * @param {boolean} inThread whether this is the thread panel
   */
  constructor(app, els, inThread) {
    this.app = app;
    this.els = els;
    this.inThread = inThread;
    this.room = null;
    this.threadId = null;
    this.views = new Map(); // messageId or clientId -> element
    this.editing = null;
    this.picking = null;
    this.stuck = true; // the view follows the newest message
    this.target = null; // the message opened by a link or a search (highlighted)
    els.scroll.addEventListener("scroll", () => this.onScroll(), { passive: true });
    els.scroll.addEventListener("keydown", (event) => this.onKeyDown(event));
    // (.keys: the focused message's toolbar shows, not the pointer's, app.css)
    els.scroll.addEventListener("keydown", () => els.scroll.classList.add("keys"), true);
    els.scroll.addEventListener("pointermove", () => els.scroll.classList.remove("keys"), { passive: true });
    els.scroll.addEventListener("click", (event) => this.onClick(event));
    els.list.addEventListener("focusin", () => this.rovingFocus());
    els.list.addEventListener("focusout", (event) => {
      if (!event.relatedTarget || !els.list.contains(event.relatedTarget)) this.rovingFocus(null);
    });
    // the newest stays in view as the log shrinks or a message grows
    const follow = new ResizeObserver(() => {
      if (this.stuck) this.scrollToBottom();
    });
    follow.observe(els.scroll);
    follow.observe(els.list);
    if (els.jump) {
      els.jump.addEventListener("click", () => {
        this.scrollToBottom();
        els.jump.hidden = true;
      });
    }
  }

  /** The messages this timeline shows, oldest first. */
  messages() {
    if (!this.room) return [];
    const all = this.room.sorted;
    if (!this.inThread) return all;
    const replies = all.filter((m) => m.threadId === this.threadId);
    // a room shown away from its newest holds the live replies (main.js)
    const held = this.room.held.filter((m) => m.threadId === this.threadId && !this.room.messages.has(m.messageId));
    if (!held.length) return replies;
    return replies.concat(held).sort((a, b) => cursorCompare(a.cursor, b.cursor));
  }

  pending() {
    if (!this.room) return [];
    const items = this.app.outbox.forRoom(this.room.roomId);
    return this.inThread ? items.filter((i) => i.threadId === this.threadId) : items;
  }

  show(room, threadId = null) {
    this.room = room;
    this.threadId = threadId;
    this.target = null;
    this.editing = null;
    this.picking = null;
    this.renderAll();
    this.scrollToBottom();
  }

  /** Mark the message *messageId* as the one opened (null: none). */
  setTarget(messageId) {
    if (this.target === messageId) return;
    const old = this.target && this.views.get(this.target);
    if (old) {
      old.classList.remove("target");
      old.removeAttribute("aria-current");
    }
    this.target = messageId;
    const el = messageId && this.views.get(messageId);
    if (el) {
      el.classList.add("target");
      el.setAttribute("aria-current", "true");
    }
  }

  atBottom() {
    const s = this.els.scroll;
    return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM;
  }

  scrollToBottom() {
    const s = this.els.scroll;
    s.scrollTop = s.scrollHeight;
    this.stuck = true;
    if (this.els.jump) this.els.jump.hidden = true;
  }

  status(text) {
    this.els.status.textContent = text;
  }

  /** Rebuild every message element (a room opened, a page arrived). */
  renderAll() {
    // the message with the focus keeps it (a page arrived around it)
    const active = document.activeElement;
    const focused = active && this.els.list.contains(active) ? active.closest(".msg") : null;
    const focusedId = focused && focused === active ? focused.dataset.messageId : null;
    this.views.clear();
    const nodes = this.messages().map((m) => this.view(m));
    for (const item of this.pending()) nodes.push(this.pendingView(item));
    this.els.list.replaceChildren(...nodes);
    this.regroup();
    if (!this.inThread && this.app.unread) this.app.unread.place(); // (main.js: unread.js)
    this.rovingFocus();
    const twin = focusedId && this.views.get(focusedId);
    if (twin) twin.focus({ preventScroll: true });
  }

  /** Older messages were put in front: keep what the person looks at in place. */
  renderKeepingPosition() {
    const s = this.els.scroll;
    const fromBottom = s.scrollHeight - s.scrollTop;
    this.els.scroll.setAttribute("aria-busy", "true");
    this.renderAll();
    s.scrollTop = s.scrollHeight - fromBottom;
    this.els.scroll.removeAttribute("aria-busy");
  }

  /** A message arrived or changed: update its element (or insert it in order). */
  upsert(message) {
    if (this.inThread && message.threadId !== this.threadId) return;
    const stick = this.atBottom();
    const old = this.views.get(message.messageId);
    const fresh = this.view(message);
    if (old) {
      const key = focusKey(old);
      old.replaceWith(fresh);
      if (!this.editing) refocus(fresh, key);
    } else {
      const list = this.messages();
      const index = list.findIndex((m) => m.messageId === message.messageId);
      const next = list[index + 1];
      const before = next ? this.views.get(next.messageId) : this.els.list.querySelector(".msg.pending");
      this.els.list.insertBefore(fresh, before || null);
      if (stick) this.scrollToBottom();
      else if (this.els.jump && message.senderId !== this.app.store.me.participantId) {
        this.els.jump.hidden = false;
      }
    }
    this.regroup();
    this.rovingFocus();
  }

  remove(messageId) {
    const el = this.views.get(messageId);
    if (el) {
      el.remove();
      this.views.delete(messageId);
      this.regroup();
    }
  }

  /** Day separators; a message from the author of the one before, within
   * 5 minutes, joins its group (name and time said once). */
  regroup() {
    const list = this.els.list;
    const wanted = new Map(); // message -> the separator before it
    let prev = {};
    for (const el of list.querySelectorAll(".msg")) {
      const { time, sender, to } = el.dataset;
      const when = time ? new Date(time) : new Date();
      const day = when.toDateString();
      el.classList.toggle("cont", prev.day === day && sender === prev.sender && !to && when - prev.when < 3e5);
      if (prev.day !== day) wanted.set(el, dayLabel(when));
      prev = { day, when, sender: to ? null : sender };
    }
    for (const sep of list.querySelectorAll(".day")) {
      const next = sep.nextElementSibling;
      if (wanted.get(next) === sep.getAttribute("aria-label")) wanted.delete(next);
      else sep.remove();
    }
    for (const [el, day] of wanted) {
      el.before(h("div", { class: "day", role: "separator", "aria-label": day }, h("span", { "aria-hidden": "true", text: day })));
    }
  }

  /** Pending messages changed: redraw them at the end. */
  renderPending() {
    const stick = this.atBottom();
    for (const el of this.els.list.querySelectorAll(".msg.pending")) el.remove();
    for (const item of this.pending()) this.els.list.append(this.pendingView(item));
    this.regroup();
    this.rovingFocus();
    if (stick) this.scrollToBottom();
  }

  onScroll() {
    this.stuck = this.atBottom();
    if (this.els.jump && this.stuck) this.els.jump.hidden = true;
    if (this.els.scroll.scrollTop < NEAR_TOP) this.app.loadOlder(this);
    if (!this.inThread && this.atBottom()) {
      this.app.markVisibleRead();
      if (this.room && this.room.hasNewer) this.app.loadNewer(this.room);
    }
  }

  /** One tab stop: Up/Down between messages, Enter or the menu key to its
   * actions, Left/Right along them, Escape back. */
  onKeyDown(event) {
    const target = event.target;
    if (target.closest("textarea, input, select")) return;
    const msg = target.closest(".msg");
    if (msg && target === msg && (event.key === "Enter" || event.key === "ContextMenu")) {
      const first = msg.querySelector(".msg-actions button") || msg.querySelector(CONTROLS);
      if (first) {
        event.preventDefault();
        first.focus();
      }
      return;
    }
    if (msg && target !== msg && event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      msg.focus();
      return;
    }
    const bar = target.closest(".msg-actions");
    if (bar && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      const buttons = [...bar.querySelectorAll("button")];
      const step = event.key === "ArrowRight" ? 1 : -1;
      const next = buttons[(buttons.indexOf(target) + step + buttons.length) % buttons.length];
      event.preventDefault();
      next.focus();
      return;
    }
    if (event.key !== "ArrowUp" && event.key !== "ArrowDown") return;
    const items = [...this.els.list.querySelectorAll(".msg")];
    if (!items.length) return;
    const up = event.key === "ArrowUp";
    const index = items.indexOf(msg);
    let next = items[Math.max(0, Math.min(items.length - 1, index + (up ? -1 : 1)))];
    if (index === -1) {
      // from the log: the last (Up) or first (Down) message in view
      const view = this.els.scroll.getBoundingClientRect();
      const seen = items.filter((el) => {
        const r = el.getBoundingClientRect();
        return r.bottom > view.top && r.top < view.bottom;
      });
      next = (up ? seen[seen.length - 1] : seen[0]) || next;
    }
    event.preventDefault();
    const open = this.picking && this.room.find(this.picking);
    if (open) {
      // (its picker closes)
      this.picking = null;
      this.upsert(open);
      if (next.dataset.messageId === open.messageId) next = this.views.get(open.messageId);
    }
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }

  /** Only the controls of *current* (default: the focused message) are tab stops. */
  rovingFocus(current = undefined) {
    if (current === undefined) {
      const active = document.activeElement;
      current = active && this.els.list.contains(active) ? active.closest(".msg") : null;
    }
    for (const el of this.els.list.querySelectorAll(".msg")) {
      el.setAttribute("tabindex", "-1");
      const stop = el === current ? "0" : "-1";
      for (const control of el.querySelectorAll(CONTROLS)) {
        if (control.getAttribute("tabindex") !== stop) control.setAttribute("tabindex", stop);
      }
    }
  }

  // views ---------------------------------------------------------------------

  view(message) {
    const { store } = this.app;
    const me = store.me.participantId;
    const mine = message.senderId === me;
    const sender = store.participant(message.senderId);
    const headId = `h-${this.inThread ? "t" : "m"}-${message.messageId}`;
    const classes = ["msg"];
    if (mine) classes.push("mine");
    if (!mine && store.mentionsMe(message)) classes.push("mentions-me");
    if (message.trustLevel === "federated") classes.push("federated");
    const target = !this.inThread && message.messageId === this.target;
    if (target) classes.push("target");
    const head = h(
      "header",
      { class: "msg-head", id: headId },
      h("button", { type: "button", class: "link who", "aria-haspopup": "dialog" }, bdi(sender?.displayName || message.senderName, "msg-sender")),
      sender?.displayName ? bdi("@" + message.senderName, "hint") : null,
      participantBadges(
        sender || { type: "human", trustLevel: message.trustLevel, origin: message.origin },
      ),
      message.to ? h("span", { class: "msg-to" }, "to ", bdi("@" + store.nameOf(message.to))) : null,
      h("time", { datetime: message.timestamp, title: longTime(message.timestamp), text: shortTime(message.timestamp) }),
      message.editedAt ? h("span", { class: "edited", title: `edited ${longTime(message.editedAt)}`, text: "(edited)" }) : null,
    );
    const el = h(
      "article",
      {
        class: classes.join(" "),
        tabindex: "-1",
        "aria-labelledby": headId,
        "aria-current": target ? "true" : null,
        dataset: { messageId: message.messageId, time: message.timestamp, sender: message.senderId, to: message.to || "" },
      },
      avatar(message.senderId, message.senderName),
      head,
      message.threadId && !this.inThread ? this.replyContext(message) : null,
      this.editing === message.messageId && tools ? tools.editForm(this, message) : this.body(message.content),
      attachmentsView(message),
      this.reactionsView(message),
      this.inThread ? null : this.app.threadSummary(message),
      this.picking === message.messageId && tools ? tools.pickerView(this, message) : null,
      this.actions(message, mine),
    );
    this.views.set(message.messageId, el);
    if (el.querySelector(".msg-body a[href^='http']")) {
      const grew = () => this.stuck && this.scrollToBottom();
      import("./previews.js").then((m) => m.attach(this.app.api, message, el, grew), () => {});
    }
    for (const img of el.querySelectorAll("img")) {
      img.addEventListener("load", () => {
        if (this.stuck) this.scrollToBottom();
      });
    }
    return el;
  }

  body(content) {
    const { store } = this.app;
    const body = h(
      "div",
      { class: "msg-body", dir: "auto" },
      render(content, { isName: (name) => store.isName(name), me: store.me.name }),
    );
    for (const pre of body.querySelectorAll("pre")) {
      const box = h("div", { class: "code" });
      pre.replaceWith(box);
      box.append(pre, h("button", { type: "button", class: "small copy", text: "Copy" }));
    }
    return body;
  }

  /** Copy, a name or avatar (the profile card), an image (the viewer): reading.js. */
  onClick(event) {
    const el = event.target.closest(".copy, .who, .avatar, .image a");
    if (!el || event.ctrlKey || event.metaKey || event.shiftKey) return; // (a new tab, as asked)
    event.preventDefault();
    import("./reading.js").then((m) => m.clicked(this, el));
  }

  replyContext(message) {
    const parent = this.room.messages.get(message.threadId);
    const label = parent
      ? `${parent.senderName}: ${parent.content.slice(0, 60)}${parent.content.length > 60 ? "…" : ""}`
      : "an earlier message";
    return h(
      "p",
      { class: "reply-to" },
      h("span", { "aria-hidden": "true", text: "↪ " }),
      "in a thread: ",
      h(
        "button",
        {
          type: "button",
          class: "link",
          on: { click: () => this.app.openThread(this.room.roomId, message.threadId) },
        },
        bdi(label),
      ),
    );
  }

  reactionsView(message) {
    if (!message.reactions || !message.reactions.length) return null;
    const { store } = this.app;
    const me = store.me.participantId;
    const canReact = this.app.roomCan(this.room, "messages.react");
    return h(
      "div",
      { class: "reactions", role: "group", "aria-label": "Reactions" },
      message.reactions.map((r) => {
        const who = r.participantIds.map((id) => store.nameOf(id));
        const mineToo = r.participantIds.includes(me);
        return h(
          "button",
          {
            type: "button",
            class: mineToo ? "reaction mine" : "reaction",
            "aria-pressed": mineToo ? "true" : "false",
            "aria-label": `${r.emoji} ${r.count}: ${who.join(", ")}`,
            title: who.join(", "),
            disabled: canReact ? null : true,
            on: { click: () => this.app.toggleReaction(message, r.emoji, !mineToo) },
          },
          h("span", { class: "emoji", text: r.emoji }),
          h("span", { class: "count", text: String(r.count) }),
        );
      }),
    );
  }

  closePicker(message) {
    this.picking = null;
    this.upsert(message);
    this.focusAction(message.messageId, "Add reaction");
  }

  focusAction(messageId, label) {
    const el = this.views.get(messageId);
    const button = el && [...el.querySelectorAll(".msg-actions button")].find((b) => b.textContent === label);
    if (button) button.focus();
  }

  actions(message, mine) {
    const app = this.app;
    const room = this.room;
    const buttons = [];
    if (app.roomCan(room, "messages.react")) {
      buttons.push(
        h("button", {
          type: "button",
          text: "Add reaction",
          "aria-expanded": this.picking === message.messageId ? "true" : "false",
          on: {
            click: async () => {
              tools ||= await import("./msgtools.js");
              this.picking = this.picking === message.messageId ? null : message.messageId;
              this.upsert(message);
              const first = this.views.get(message.messageId).querySelector(".picker button");
              if (first) first.focus();
            },
          },
        }),
      );
    }
    if (!this.inThread && app.roomCan(room, "messages.send")) {
      buttons.push(
        h("button", {
          type: "button",
          text: "Reply in thread",
          on: { click: () => app.openThread(room.roomId, message.threadId || message.messageId) },
        }),
      );
    }
    if (mine || app.roomCan(room, "messages.edit")) {
      buttons.push(
        h("button", {
          type: "button",
          text: "Edit message",
          on: { click: () => this.edit(message) },
        }),
      );
    }
    if (mine || app.roomCan(room, "messages.delete")) {
      buttons.push(
        h("button", {
          type: "button",
          text: "Delete message",
          on: { click: () => app.deleteMessage(message) },
        }),
      );
    }
    if (room.pins && app.roomCan(room, "messages.send")) {
      const pinned = room.pins.has(message.messageId);
      buttons.push(
        h("button", { type: "button", text: pinned ? "Unpin message" : "Pin message", on: { click: () => run(app, "pins", "pin", message, !pinned) } }),
      );
    }
    if (!buttons.length) return null;
    return h(
      "div",
      { class: "msg-actions", role: "toolbar", "aria-label": `Actions for the message from ${message.senderName}` },
      buttons,
    );
  }

  /** Edit *message*; then the focus goes to *back* or its Edit button. */
  async edit(message, back = null) {
    tools ||= await import("./msgtools.js");
    this.editing = message.messageId;
    this.editBack = back;
    this.upsert(message);
    const form = this.views.get(message.messageId).querySelector(".edit-form");
    const box = form.querySelector("textarea");
    box.focus({ preventScroll: true });
    box.setSelectionRange(box.value.length, box.value.length);
    form.scrollIntoView({ block: "nearest" });
  }

  pendingView(item) {
    const failed = item.status === "failed";
    const { store } = this.app;
    const headId = `h-p-${item.clientId}`;
    return h(
      "article",
      {
        class: failed ? "msg mine pending failed" : "msg mine pending",
        tabindex: "-1",
        "aria-labelledby": headId,
        dataset: { clientId: item.clientId, sender: store.me.participantId },
      },
      avatar(store.me.participantId, store.me.name),
      h(
        "header",
        { class: "msg-head", id: headId },
        bdi(store.me.name, "msg-sender"),
        h("span", { class: "msg-state", text: failed ? "not sent" : "sending…" }),
      ),
      this.body(item.content),
      item.attachments && item.attachments.length
        ? h("p", { class: "hint", text: `${item.attachments.length} attachment(s)` })
        : null,
      failed
        ? h(
            "p",
            { class: "send-error", role: "alert" },
            `Not sent: ${item.error}`,
            " ",
            h("button", { type: "button", text: "Retry", on: { click: () => this.app.outbox.retry(item.clientId) } }),
            " ",
            h("button", { type: "button", text: "Discard", on: { click: () => this.app.outbox.discard(item.clientId) } }),
          )
        : item.error
          ? h("p", { class: "hint", text: item.error })
          : null,
    );
  }
}
