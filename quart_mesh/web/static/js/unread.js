// Opening a room with unread messages (fetched the first time one is opened):
// a "New messages" divider above the first unread one, the room shown from
// there when that message is not in view, "Jump to first unread" while it is
// above the fold, and the read position moved as one scrolls down through
// them (not all at once on opening). The first unread message is the first
// after the read position the room was opened with (`lastReadCursor` of
// GET /api/status); when it is not among the newest page, the page around
// that position is loaded (GET …/messages?around=, docs/rest.md).

import { $, cursorCompare, h } from "./dom.js";

export class Unread {
  constructor(app) {
    this.app = app;
    this.timer = 0;
    this.divider = h(
      "div",
      { class: "unread-divider", role: "separator", "aria-label": "New messages" },
      h("span", { "aria-hidden": "true", text: "New messages" }),
    );
    this.jump = h("button", { type: "button", class: "small jump-unread", hidden: true, text: "Jump to first unread" });
    this.jump.addEventListener("click", () => this.toDivider(true));
    this.scroll = $("timeline");
    this.scroll.before(this.jump);
    this.scroll.addEventListener("scroll", () => this.onScroll(), { passive: true });
  }

  get room() {
    const room = this.app.store.rooms.get(this.app.currentRoomId);
    return room && room.unreadFrom ? room : null;
  }

  /** The first message of the open room after the read position it was
   * opened with (not one's own), if loaded. */
  first() {
    const room = this.room;
    if (!room) return null;
    const me = this.app.store.me.participantId;
    return this.app.timeline.messages().find((m) => m.senderId !== me && cursorCompare(m.cursor, room.unreadFrom) > 0) || null;
  }

  /** Put the divider before the first unread message (after every render). */
  place() {
    const message = this.first();
    const el = message && this.app.timeline.views.get(message.messageId);
    if (!el) {
      this.divider.remove();
    } else if (this.divider.nextElementSibling !== el) {
      el.before(this.divider);
    }
    this.update();
    return el;
  }

  /** The room's messages are in: show them from the first unread one when
   * it would not be in view at the bottom, and load it when it is older
   * than the page. */
  settle(room) {
    if (room !== this.room) return;
    const { app } = this;
    const timeline = app.timeline;
    if (!this.place()) {
      const oldest = room.oldestCursor;
      if (room.hasOlder && oldest && cursorCompare(oldest, room.unreadFrom) > 0) {
        app.loadAround(room, room.unreadFrom, true);
        return;
      }
      room.unreadFrom = null; // (read meanwhile, elsewhere)
      timeline.scrollToBottom();
      if (room.hasNewer) app.loadNewer(room);
      else app.markVisibleRead();
      return;
    }
    timeline.scrollToBottom();
    if (!this.inView()) this.toDivider(false);
    this.update();
    this.markSeen();
    // the page reaches the bottom of the view: the newer ones (if any) now
    if (room.hasNewer && timeline.atBottom()) app.loadNewer(room);
  }

  /** Whether the divider is below the top of the visible timeline. */
  inView() {
    return this.divider.getBoundingClientRect().top >= this.scroll.getBoundingClientRect().top;
  }

  toDivider(focus) {
    if (!this.divider.isConnected) return;
    const s = this.scroll;
    s.scrollTop += this.divider.getBoundingClientRect().top - s.getBoundingClientRect().top - 4;
    this.app.timeline.stuck = this.app.timeline.atBottom();
    if (focus) {
      const first = this.divider.nextElementSibling;
      if (first) first.focus({ preventScroll: true });
    }
    this.update();
  }

  update() {
    this.jump.hidden = !(this.room && this.divider.isConnected && !this.inView());
  }

  onScroll() {
    if (!this.room) return;
    this.update();
    this.markSeen();
  }

  /** The read position follows the newest message fully in view (at the
   * bottom, main.js marks the newest as always). */
  markSeen() {
    const { app } = this;
    const room = this.room;
    if (!room || !room.joined || document.visibilityState !== "visible") return;
    const bottom = this.scroll.getBoundingClientRect().bottom + 1;
    const messages = app.timeline.messages();
    for (let i = messages.length - 1; i >= 0; i--) {
      const el = app.timeline.views.get(messages[i].messageId);
      if (!el || el.getBoundingClientRect().bottom > bottom) continue;
      if (cursorCompare(messages[i].cursor, room.seenCursor) > 0) {
        room.seenCursor = messages[i].cursor;
        clearTimeout(this.timer);
        this.timer = setTimeout(() => app.sendRead(room), 300);
      }
      return;
    }
  }
}
