// The message box: Enter sends, Shift+Enter breaks the line; `@` completes
// participants' names (and addresses the message to the first one chosen,
// `to`); files upload as soon as they are chosen, with progress; typing is
// signalled to the room (at most every 2.5 s).

import { h, icon } from "./dom.js";

let composers = 0;
export const MENTION_AT_CARET = /(?:^|[^\p{L}\p{N}_.])@([\p{L}\p{N}_.\-]{0,64})$/u;

/** Unsent text per room and thread, per account (decision 0075). */
export class Drafts {
  all = {};

  constructor() {
    addEventListener("pagehide", () => this.save());
  }

  attach(participantId) {
    this.epoch = (this.epoch || 0) + 1;
    this.key = `mesh.drafts.${participantId}`;
    this.on = true;
    try {
      this.all = JSON.parse(localStorage.getItem(this.key)) || {};
    } catch {
      this.all = {};
    }
  }

  get(id) {
    return this.all[id]?.[0] || "";
  }

  set(id, text) {
    if (text.trim()) this.all[id] = [text.slice(0, 40000), Date.now()];
    else delete this.all[id];
    const ids = Object.keys(this.all).sort((a, b) => this.all[b][1] - this.all[a][1]);
    for (const old of ids.slice(50)) delete this.all[old];
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.save(), 300);
  }

  delete(id) {
    this.set(id, "");
  }

  save() {
    clearTimeout(this.timer);
    try {
      if (this.on) localStorage.setItem(this.key, JSON.stringify(this.all));
    } catch {
      // (storage full or off: kept for this page)
    }
  }

  /** Forget them; *drop*: from the storage too. */
  clear(drop) {
    this.save();
    this.on = false;
    if (drop && this.key) localStorage.removeItem(this.key);
    this.all = {};
  }
}

export class Composer {
  /**
   * @param {object} app
   * @param {HTMLElement} slot where the composer goes
   * @param {boolean} inThread replies in the thread panel
   */
  constructor(app, slot, inThread) {
    this.app = app;
    this.inThread = inThread;
    this.room = null;
    this.threadId = null;
    this.uploads = [];
    this.mentioned = new Map(); // lower-case name -> participantId
    this.suggestions = [];
    this.active = 0;
    const n = ++composers;
    this.id = `composer-${n}`;
    this.box = h("textarea", {
      id: `${this.id}-input`,
      class: "composer-input",
      rows: "1",
      "aria-describedby": `${this.id}-hint`,
      "aria-autocomplete": "list",
      "aria-controls": `${this.id}-mentions`,
      autocomplete: "off",
    });
    this.label = h("label", { for: this.box.id, class: "sr-only", text: "Message" });
    this.listbox = h("ul", {
      id: `${this.id}-mentions`,
      class: "mentions",
      role: "listbox",
      "aria-label": "People to mention",
      hidden: true,
    });
    this.fileInput = h("input", {
      type: "file",
      multiple: true,
      class: "sr-only",
      tabindex: "-1",
      "aria-hidden": "true",
    });
    this.attach = h(
      "button",
      { type: "button", class: "icon-button", "aria-label": "Attach files", title: "Attach files" },
      icon("attach"),
    );
    this.send = h("button", { type: "submit", class: "primary", text: inThread ? "Reply" : "Send" });
    this.uploadList = h("ul", { class: "uploads", "aria-label": "Files to send", hidden: true });
    this.error = h("p", { class: "error", role: "alert" });
    this.blockedNote = h("p", { class: "composer-blocked", hidden: true });
    this.row = h(
      "div",
      { class: "composer-row" },
      this.label,
      this.box,
      this.fileInput,
      this.attach,
      this.send,
    );
    this.hint = h("p", {
      id: `${this.id}-hint`,
      class: "hint composer-hint",
      text: "Enter to send, Shift+Enter for a new line, @ to mention someone",
    });
    this.form = h(
      "form",
      {
        class: inThread ? "composer thread-composer" : "composer",
        "aria-label": inThread ? "Reply in thread" : "Send a message",
        novalidate: true,
      },
      this.listbox,
      this.uploadList,
      this.row,
      this.error,
      this.hint,
      this.blockedNote,
    );
    slot.replaceChildren(this.form);

    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    this.box.addEventListener("keydown", (event) => this.onKeyDown(event));
    this.box.addEventListener("input", () => this.onInput());
    this.box.addEventListener("blur", () => setTimeout(() => this.listbox.hidden || this.more("closeSuggestions"), 150));
    this.attach.addEventListener("click", () => this.fileInput.click());
    this.fileInput.addEventListener("change", () => {
      this.more("startUploads", [...this.fileInput.files]);
      this.fileInput.value = "";
    });
    this.box.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (files.length) {
        event.preventDefault();
        this.more("startUploads", files);
      }
    });
  }

  /** The draft's key: the room, or the room and thread. */
  get draft() {
    return this.threadId ? `${this.room.roomId}/${this.threadId}` : this.room.roomId;
  }

  /** Point the composer at a room (and thread); keep each one's draft. */
  setTarget(room, threadId = null) {
    const { drafts } = this.app;
    // (not into the drafts of a sign-in since)
    if (this.room && this.epoch === drafts.epoch) drafts.set(this.draft, this.box.value);
    this.epoch = drafts.epoch;
    this.room = room;
    this.threadId = threadId;
    this.mentioned.clear();
    this.error.textContent = "";
    const label = this.inThread
      ? "Reply in thread"
      : `Message ${room.isDm ? this.app.store.roomLabel(room) : "#" + room.name}`;
    this.label.textContent = label;
    this.box.placeholder = label;
    this.box.value = drafts.get(this.draft);
    this.resize();
    this.refreshPermission();
  }

  /** Show or hide the box by whether the person may post here. */
  refreshPermission() {
    if (!this.room) return;
    const app = this.app;
    let reason = "";
    if (!app.roomCan(this.room, "messages.send")) {
      reason =
        app.store.me.kind === "guest"
          ? "Guests cannot post on this mesh. Register for an account to join the conversation."
          : "You cannot post in this room.";
    } else if (!this.room.joined) {
      reason = "Join the room to post in it.";
    }
    this.row.hidden = Boolean(reason);
    this.hint.hidden = Boolean(reason);
    this.blockedNote.hidden = !reason;
    this.blockedNote.textContent = reason;
    this.attach.hidden = !app.roomCan(this.room, "files.upload");
  }

  focus() {
    if (!this.row.hidden) this.box.focus();
  }

  resize() {
    this.box.style.height = "auto";
    this.box.style.height = `${Math.min(this.box.scrollHeight, 200)}px`;
  }

  onInput() {
    this.resize();
    if (this.room) this.app.drafts.set(this.draft, this.box.value);
    this.error.textContent = "";
    if (this.box.value.trim() && this.room) this.app.typing(this.room);
    if (!this.listbox.hidden || MENTION_AT_CARET.test(this.box.value.slice(0, this.box.selectionStart))) this.more("suggest");
  }

  onKeyDown(event) {
    const open = !this.listbox.hidden;
    if (open && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      this.active = (this.active + step + this.suggestions.length) % this.suggestions.length;
      this.more("renderSuggestions");
      return;
    }
    if (open && (event.key === "Enter" || event.key === "Tab") && !event.shiftKey) {
      event.preventDefault();
      this.more("choose", this.suggestions[this.active]);
      return;
    }
    if (open && event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      this.more("closeSuggestions");
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      this.submit();
    }
    // Up in an empty box edits one's last message
    const last = event.key === "ArrowUp" && !this.box.value && !this.inThread && !(event.shiftKey || event.altKey || event.ctrlKey || event.metaKey)
      && this.app.timeline.messages().findLast((m) => m.senderId === this.app.store.me.participantId);
    if (last) {
      event.preventDefault();
      this.app.timeline.edit(last, this.box);
    }
  }

  /** Call *fn* of writing.js (the suggestions, uploads: fetched when first used). */
  more(fn, ...args) {
    import("./writing.js").then((m) => m[fn](this, ...args), (e) => (this.error.textContent = e.message));
  }

  /** The participant the message is addressed to: the first one chosen from
   * the suggestions whose @name is still in the text. */
  addressee(content) {
    const lower = content.toLowerCase();
    for (const [name, id] of this.mentioned) if (lower.includes("@" + name)) return id;
    return null;
  }

  // sending ------------------------------------------------------------------------

  /** A message refused for good: its text back, the reason beside it. */
  giveBack(content, reason) {
    const typed = this.box.value;
    this.box.value = typed.trim() ? `${content}\n${typed}` : content;
    this.resize();
    this.app.drafts.set(this.draft, this.box.value);
    this.error.textContent = reason;
    this.box.focus();
    this.box.setSelectionRange(0, 0);
    this.box.scrollTop = 0;
    this.form.scrollIntoView({ block: "nearest" });
  }

  submit() {
    if (!this.room || this.row.hidden) return;
    if (this.uploads.some((u) => !u.result && !u.error)) {
      this.error.textContent = "Wait until the files have uploaded.";
      return;
    }
    if (this.uploads.some((u) => u.error)) {
      this.error.textContent = "Remove the files that did not upload first.";
      return;
    }
    const ready = this.uploads.map((u) => u.result);
    let content = this.box.value.replace(/^\n+/, "").trimEnd();
    if (!content.trim() && !ready.length) return;
    if (!content.trim()) content = ready.map((u) => u.filename).join(", ");
    this.app.send(this.room, {
      content,
      to: this.addressee(content),
      threadId: this.threadId,
      attachments: ready.map((u) => u.uploadId),
    });
    this.box.value = "";
    this.uploads = [];
    this.mentioned.clear();
    this.uploadList.hidden = true;
    this.uploadList.replaceChildren();
    this.resize();
    this.app.drafts.delete(this.draft);
    this.box.focus();
  }
}
