// The thread pane (a message's replies beside the room): fetched with its
// styles (css/thread.css) the first time a thread is opened; the chat's
// first paint never needs it.

import { Composer } from "./composer.js";
import { $, h, icon } from "./dom.js";
import { Timeline } from "./room.js";

const PAGE = 50;
const HELD_MAX = 1000;

export class ThreadPane {
  constructor(app) {
    this.app = app;
    this.roomId = null;
    this.rootId = null;
    this.hasOlder = false;
    this.loading = false;
    const close = h(
      "button",
      { type: "button", id: "close-thread", class: "icon-button", "aria-label": "Close thread" },
      icon("close"),
    );
    close.addEventListener("click", () => this.close(true));
    this.rootSlot = h("div", { id: "thread-root", class: "thread-root" });
    const status = h("p", { id: "thread-status", class: "history-status", role: "status" });
    const list = h("div", { id: "thread-list", class: "message-list" });
    const scroll = h(
      "div",
      { id: "thread-timeline", class: "timeline thread-timeline", role: "log", "aria-labelledby": "thread-title", tabindex: "0" },
      this.rootSlot,
      status,
      list,
    );
    const slot = h("div", { id: "thread-composer-slot" });
    this.panel = h(
      "aside",
      { id: "thread-panel", class: "thread-panel", hidden: true, "aria-labelledby": "thread-title" },
      h("header", { class: "thread-header" }, h("h2", { id: "thread-title", text: "Thread" }), close),
      scroll,
      slot,
    );
    // Escape in the pane closes it (unless something in it used the key)
    this.panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !event.defaultPrevented && !document.querySelector("dialog[open]")) {
        event.preventDefault();
        this.close(true);
      }
    });
    $("conversation").after(this.panel);
    this.timeline = new Timeline(app, { scroll, list, status }, true);
    this.composer = new Composer(app, slot, true);
  }

  get room() {
    return this.app.store.rooms.get(this.roomId);
  }

  async open(roomId, rootId) {
    const room = this.app.store.rooms.get(roomId);
    if (!room) return;
    this.roomId = roomId;
    this.rootId = rootId;
    this.panel.hidden = false;
    $("chat").classList.add("thread-open");
    this.composer.setTarget(room, rootId);
    // a reply the node refused (too large) while this thread was closed
    const kept = this.app.keptReplies.get(`${roomId} ${rootId}`);
    if (kept) {
      this.app.keptReplies.delete(`${roomId} ${rootId}`);
      this.composer.giveBack(kept.content, kept.reason);
    }
    this.timeline.show(room, rootId);
    this.renderRoot();
    await this.load();
    if (this.rootId === rootId) this.composer.focus();
  }

  close(returnFocus = false) {
    const rootId = this.rootId;
    this.roomId = null;
    this.rootId = null;
    this.panel.hidden = true;
    $("chat").classList.remove("thread-open");
    if (returnFocus && rootId) {
      const el = $("message-list").querySelector(`[data-message-id="${rootId}"]`);
      if (el) el.focus();
    }
  }

  renderRoot() {
    const room = this.room;
    const root = room && room.find(this.rootId);
    if (root) {
      const view = this.timeline.view(root);
      this.timeline.views.delete(root.messageId);
      this.rootSlot.replaceChildren(view);
    } else {
      this.rootSlot.replaceChildren(
        h("p", { class: "hint", text: room && room.loaded ? "The first message of this thread was deleted or is not loaded." : "" }),
      );
    }
  }

  /** The thread's root and its newest replies (older ones on scrolling up). */
  async load() {
    const { app } = this;
    const room = this.room;
    const rootId = this.rootId;
    if (!room || !rootId) return;
    const base = `/api/rooms/${encodeURIComponent(room.roomId)}/messages`;
    this.timeline.status("Loading the thread…");
    try {
      if (!room.find(rootId)) {
        try {
          room.keep(await app.api.get(`${base}/${encodeURIComponent(rootId)}`), HELD_MAX);
        } catch (error) {
          if (error.code !== "message_not_found") throw error;
        }
      }
      const replies = await app.api.get(`${base}?threadId=${encodeURIComponent(rootId)}&limit=${PAGE}`);
      for (const m of replies) room.keep(m, HELD_MAX);
      this.hasOlder = replies.length === PAGE;
    } catch (error) {
      this.timeline.status(`The thread could not be loaded: ${error.message}`);
      return;
    }
    if (this.rootId !== rootId) return;
    this.timeline.status("");
    this.renderRoot();
    this.timeline.renderAll();
    this.timeline.scrollToBottom();
    if (room.roomId === app.currentRoomId) app.timeline.renderAll();
  }

  async loadOlder() {
    const room = this.room;
    if (!room || !this.hasOlder || this.loading) return;
    const replies = this.timeline.messages();
    if (!replies.length) return;
    this.loading = true;
    try {
      const page = await this.app.api.get(
        `/api/rooms/${encodeURIComponent(room.roomId)}/messages?threadId=${encodeURIComponent(this.rootId)}&limit=${PAGE}&before=${replies[0].cursor}`,
      );
      for (const m of page) room.keep(m, HELD_MAX);
      this.hasOlder = page.length === PAGE;
    } catch {
      return;
    } finally {
      this.loading = false;
    }
    this.timeline.renderKeepingPosition();
  }
}
