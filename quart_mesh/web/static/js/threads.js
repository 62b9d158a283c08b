// A room's threads (GET /api/rooms/:roomId/threads): a dialog listing them,
// the most recently replied to first, each its root's author and text, its
// reply count and when the newest reply came; one opens the thread. Fetched
// when the room header's "Threads" is first used.

import { bdi, focusBack, h, icon, shortTime } from "./dom.js";

const PAGE = 20;

export class ThreadList {
  constructor(app) {
    this.app = app;
    this.room = null;
    this.next = null;
    this.title = h("h2", { id: "threads-title", text: "Threads" });
    this.status = h("p", { class: "hint", role: "status" });
    this.list = h("ul", { class: "thread-items" });
    this.more = h("button", { type: "button", hidden: true, text: "More threads" });
    this.more.addEventListener("click", () => this.load());
    const close = h("button", { type: "button", class: "icon-button", "aria-label": "Close threads" }, icon("close"));
    this.dialog = h(
      "dialog",
      { class: "dialog wide", "aria-labelledby": "threads-title" },
      h("header", { class: "dialog-head" }, this.title, close),
      this.status,
      this.list,
      h("p", {}, this.more),
    );
    close.addEventListener("click", () => this.dialog.close());
    this.dialog.addEventListener("close", () => {
      if (!this.opening) focusBack(this.dialog, this.returnTo);
      this.opening = false;
    });
    document.body.append(this.dialog);
  }

  async open(room) {
    const { store } = this.app;
    this.room = room;
    this.next = null;
    this.returnTo = document.activeElement;
    this.title.replaceChildren("Threads in ", bdi(room.isDm ? store.roomLabel(room) : `#${room.name}`));
    this.list.replaceChildren();
    this.more.hidden = true;
    this.dialog.showModal();
    await this.load();
  }

  async load() {
    const room = this.room;
    const before = this.next;
    this.status.textContent = "Loading threads…";
    let page;
    try {
      page = await this.app.api.get(
        `/api/rooms/${encodeURIComponent(room.roomId)}/threads?limit=${PAGE}${before ? `&before=${encodeURIComponent(before)}` : ""}`,
      );
    } catch (error) {
      if (room === this.room) this.status.textContent = `The threads could not be loaded: ${error.message}`;
      return;
    }
    if (room !== this.room || before !== this.next) return; // (another room's list meanwhile)
    this.next = page.nextBefore;
    this.list.append(...page.threads.map((root) => this.item(root)));
    this.more.hidden = !this.next;
    const count = this.list.children.length;
    this.status.textContent = count ? `${count} thread${count === 1 ? "" : "s"}${this.next ? " so far" : ""}` : "No threads here yet.";
    if (!before && count) this.list.querySelector("button").focus();
  }

  item(root) {
    const n = root.threadReplies || 0;
    const text = root.content.length > 140 ? `${root.content.slice(0, 140)}…` : root.content;
    const button = h(
      "button",
      { type: "button", class: "thread-item" },
      h("span", { class: "thread-item-root" }, bdi(root.senderName, "msg-sender"), ": ", h("span", { dir: "auto", text })),
      h(
        "span",
        { class: "hint thread-item-meta" },
        `${n} repl${n === 1 ? "y" : "ies"}`,
        root.lastReplyAt ? `, last reply ${shortTime(root.lastReplyAt)}` : "",
      ),
    );
    button.addEventListener("click", () => {
      this.opening = true;
      this.dialog.close();
      this.app.openThread(root.roomId, root.messageId);
    });
    return h("li", {}, button);
  }
}
