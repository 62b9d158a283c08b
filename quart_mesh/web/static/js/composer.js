// The message box: Enter sends, Shift+Enter breaks the line; `@` completes
// participants' names (and addresses the message to the first one chosen,
// `to`); files upload as soon as they are chosen, with progress; typing is
// signalled to the room (at most every 2.5 s).

import { bdi, formatBytes, h, icon } from "./dom.js";

let composers = 0;
const MENTION_AT_CARET = /(?:^|[^\p{L}\p{N}_.])@([\p{L}\p{N}_.\-]{0,64})$/u;
const MAX_SUGGESTIONS = 8;

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
    this.box.addEventListener("blur", () => setTimeout(() => this.closeSuggestions(), 150));
    this.attach.addEventListener("click", () => this.fileInput.click());
    this.fileInput.addEventListener("change", () => {
      for (const file of this.fileInput.files) this.startUpload(file);
      this.fileInput.value = "";
    });
    this.box.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (files.length) {
        event.preventDefault();
        for (const file of files) this.startUpload(file);
      }
    });
  }

  /** Point the composer at a room (and thread); keep each room's draft. */
  setTarget(room, threadId = null) {
    if (this.room && !this.inThread) this.app.drafts.set(this.room.roomId, this.box.value);
    this.room = room;
    this.threadId = threadId;
    this.mentioned.clear();
    this.error.textContent = "";
    const label = this.inThread
      ? "Reply in thread"
      : `Message ${room.isDm ? this.app.store.roomLabel(room) : "#" + room.name}`;
    this.label.textContent = label;
    this.box.placeholder = label;
    this.box.value = this.inThread ? "" : this.app.drafts.get(room.roomId) || "";
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
    this.error.textContent = "";
    if (this.box.value.trim() && this.room) this.app.typing(this.room);
    this.suggest();
  }

  onKeyDown(event) {
    const open = !this.listbox.hidden;
    if (open && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      this.active = (this.active + step + this.suggestions.length) % this.suggestions.length;
      this.renderSuggestions();
      return;
    }
    if (open && (event.key === "Enter" || event.key === "Tab") && !event.shiftKey) {
      event.preventDefault();
      this.choose(this.suggestions[this.active]);
      return;
    }
    if (open && event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      this.closeSuggestions();
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      this.submit();
    }
  }

  // mentions -------------------------------------------------------------------

  suggest() {
    const before = this.box.value.slice(0, this.box.selectionStart);
    const match = MENTION_AT_CARET.exec(before);
    if (!match) return this.closeSuggestions();
    const query = match[1].toLowerCase();
    const me = this.app.store.me.participantId;
    this.suggestions = [...this.app.store.participants.values()]
      .filter((p) => p.participantId !== me && p.name.toLowerCase().startsWith(query))
      .sort((a, b) => (a.online === b.online ? a.name.localeCompare(b.name) : a.online ? -1 : 1))
      .slice(0, MAX_SUGGESTIONS);
    if (!this.suggestions.length) return this.closeSuggestions();
    this.active = 0;
    this.renderSuggestions();
  }

  renderSuggestions() {
    this.listbox.replaceChildren(
      ...this.suggestions.map((p, i) =>
        h(
          "li",
          {
            id: `${this.id}-option-${i}`,
            role: "option",
            class: i === this.active ? "active" : null,
            "aria-selected": i === this.active ? "true" : "false",
            on: {
              mousedown: (event) => {
                event.preventDefault();
                this.choose(p);
              },
            },
          },
          bdi(p.name),
          p.online ? h("span", { class: "hint", text: " online" }) : null,
        ),
      ),
    );
    this.listbox.hidden = false;
    this.box.setAttribute("aria-activedescendant", `${this.id}-option-${this.active}`);
  }

  closeSuggestions() {
    this.listbox.hidden = true;
    this.suggestions = [];
    this.box.removeAttribute("aria-activedescendant");
  }

  choose(participant) {
    const caret = this.box.selectionStart;
    const before = this.box.value.slice(0, caret);
    const match = MENTION_AT_CARET.exec(before);
    if (!match) return this.closeSuggestions();
    const start = caret - match[1].length;
    const inserted = `${participant.name} `;
    this.box.value = this.box.value.slice(0, start) + inserted + this.box.value.slice(caret);
    const at = start + inserted.length;
    this.box.setSelectionRange(at, at);
    this.mentioned.set(participant.name.toLowerCase(), participant.participantId);
    this.closeSuggestions();
    this.box.focus();
  }

  /** The participant the message is addressed to: the first one chosen from
   * the suggestions whose @name is still in the text. */
  addressee(content) {
    const lower = content.toLowerCase();
    for (const [name, id] of this.mentioned) if (lower.includes("@" + name)) return id;
    return null;
  }

  // uploads ----------------------------------------------------------------------

  startUpload(file) {
    const item = { file, progress: 0, result: null, error: null, controller: new AbortController() };
    this.uploads.push(item);
    this.renderUploads();
    this.app.api
      .upload(file, (fraction) => {
        item.progress = fraction;
        this.renderUploads();
      }, item.controller.signal)
      .then((result) => {
        item.result = result;
        this.renderUploads();
      })
      .catch((error) => {
        if (error.code === "aborted") return;
        item.error = error.message;
        this.renderUploads();
      });
  }

  renderUploads() {
    this.uploadList.hidden = this.uploads.length === 0;
    this.uploadList.replaceChildren(
      ...this.uploads.map((item) => {
        const name = item.file.name || "pasted file";
        const state = item.error
          ? h("span", { class: "error", text: `not uploaded: ${item.error}` })
          : item.result
            ? h("span", { class: "hint", text: `${formatBytes(item.result.size)}, ready` })
            : h("progress", {
                max: "1",
                value: String(item.progress),
                "aria-label": `Uploading ${name}`,
              });
        return h(
          "li",
          { class: "upload" },
          icon("file"),
          bdi(name),
          " ",
          state,
          h(
            "button",
            {
              type: "button",
              class: "icon-button",
              "aria-label": `Remove ${name}`,
              on: {
                click: () => {
                  item.controller.abort();
                  this.uploads = this.uploads.filter((u) => u !== item);
                  this.renderUploads();
                  this.box.focus();
                },
              },
            },
            icon("close"),
          ),
        );
      }),
    );
  }

  // sending ------------------------------------------------------------------------

  /** A message refused for good: its text back, the reason beside it. */
  giveBack(content, reason) {
    const typed = this.box.value;
    this.box.value = typed.trim() ? `${content}\n${typed}` : content;
    this.resize();
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
    this.renderUploads();
    this.resize();
    if (!this.inThread) this.app.drafts.delete(this.room.roomId);
    this.box.focus();
  }
}
