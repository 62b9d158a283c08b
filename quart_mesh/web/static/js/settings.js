// Account and room settings (fetched when first used): in the Settings
// dialog, one's display name, password and signed-in sessions; from a room's
// header, its description (docs/web.md).

import { ago, bdi, h, icon, longTime, toast } from "./dom.js";
import { readReceiptsToggle } from "./receipts.js";

const field = (label, attrs) => {
  const input = h("input", { id: `set-${attrs.name}`, ...attrs });
  return [h("label", { for: input.id, text: label }), input];
};

/** "Firefox on Linux" from a User-Agent (or the header itself). */
function device(agent) {
  if (!agent) return "Unknown device";
  const browser = /Edg\//.test(agent) ? "Edge" : /Firefox\//.test(agent) ? "Firefox" : /Chrom(e|ium)\//.test(agent) ? "Chrome" : /Safari\//.test(agent) ? "Safari" : null;
  const system = /Android/.test(agent) ? "Android" : /iPhone|iPad/.test(agent) ? "iOS" : /Windows/.test(agent) ? "Windows" : /Mac OS/.test(agent) ? "macOS" : /Linux/.test(agent) ? "Linux" : null;
  return browser && system ? `${browser} on ${system}` : agent.slice(0, 60);
}

class Account {
  constructor(app, dialog) {
    this.app = app;
    const [nameLabel, name] = field("Display name", { name: "display-name", maxlength: "64", autocomplete: "nickname" });
    this.name = name;
    this.nameStatus = h("p", { class: "hint", role: "status" });
    const [currentLabel, current] = field("Current password", { name: "current-password", type: "password", autocomplete: "current-password", required: true });
    const [nextLabel, next] = field("New password", { name: "new-password", type: "password", autocomplete: "new-password", required: true });
    this.passwordStatus = h("p", { role: "status" });
    this.sessions = h("ul", { class: "sessions", "aria-label": "Signed-in sessions" });
    this.sessionsStatus = h("p", { class: "hint", role: "status" });
    this.others = h("button", { type: "button", text: "Sign out everywhere else", on: { click: () => this.signOutOthers() } });
    const form = (legend, submit, ...children) =>
      h("form", { class: "stack", novalidate: true, on: { submit: (e) => { e.preventDefault(); submit(); } } }, h("fieldset", { class: "stack" }, h("legend", { text: legend }), ...children));
    this.passwordForm = form(
      "Password",
      () => this.changePassword(current, next),
      currentLabel, current, nextLabel, next,
      h("button", { type: "submit", text: "Change password" }),
      this.passwordStatus,
    );
    dialog.append(
      h("div", { class: "account" },
        form(
          "Profile",
          () => this.saveName(),
          nameLabel, name,
          h("p", { class: "hint", text: "Shown beside your name. Your name itself does not change." }),
          h("button", { type: "submit", text: "Save display name" }),
          this.nameStatus,
        ),
        h("fieldset", { class: "stack" }, h("legend", { text: "Privacy" }),
          (this.receipts = readReceiptsToggle(app)),
          h("p", { class: "hint", text: "In direct messages, others see what you have read, and you see what they have. Off: neither." }),
        ),
        this.app.store.me.kind === "human" ? this.passwordForm : null,
        h("fieldset", { class: "stack" }, h("legend", { text: "Sessions" }), this.sessionsStatus, this.sessions, this.others),
      ),
    );
  }

  show() {
    const { me } = this.app.store;
    this.name.value = me.displayName || "";
    this.receipts.querySelector("input").checked = me.readReceipts !== false;
    this.nameStatus.textContent = "";
    this.passwordStatus.textContent = "";
    this.passwordForm.hidden = me.kind !== "human";
    this.loadSessions();
  }

  async saveName() {
    try {
      const me = await this.app.api.patch("/api/auth/me", { displayName: this.name.value });
      Object.assign(this.app.store.me, { displayName: me.displayName });
      this.name.value = me.displayName || "";
      this.nameStatus.textContent = me.displayName ? "Display name saved." : "Display name removed.";
    } catch (error) {
      this.nameStatus.textContent = `Not saved: ${error.message}`;
    }
  }

  async changePassword(current, next) {
    const status = this.passwordStatus;
    status.className = "error";
    if (!current.value || !next.value) {
      status.textContent = "Type your current password and a new one.";
      return;
    }
    try {
      const answer = await this.app.api.post("/api/auth/password", { current: current.value, new: next.value });
      current.value = next.value = "";
      status.className = "hint";
      const n = answer.signedOut;
      status.textContent = `Password changed. ${n ? `${n} other session${n === 1 ? " was" : "s were"} signed out.` : "No other session was signed in."}`;
      this.loadSessions();
    } catch (error) {
      status.textContent = `Not changed: ${error.code === "wrong_password" ? "the current password is not right" : error.message}`;
    }
  }

  async loadSessions() {
    let list;
    try {
      list = await this.app.api.get("/api/auth/sessions");
    } catch (error) {
      this.sessionsStatus.textContent = `The sessions could not be loaded: ${error.message}`;
      return;
    }
    this.sessionsStatus.textContent = `${list.length} signed-in session${list.length === 1 ? "" : "s"}`;
    list.sort((a, b) => b.current - a.current);
    this.others.hidden = !list.some((s) => !s.current);
    this.sessions.replaceChildren(
      ...list.map((s) => {
        const name = device(s.userAgent);
        return h(
          "li",
          { class: "session" },
          h("p", {}, h("strong", { text: name }), s.current ? h("span", { class: "badge", text: "This device" }) : null),
          h("p", {
            class: "hint",
            text: `Signed in ${longTime(s.createdAt)}${s.lastUsedAt ? ` · last used ${ago(s.lastUsedAt)}` : ""}`,
          }),
          h("button", {
            type: "button",
            class: "small",
            text: "Sign out",
            "aria-label": s.current ? "Sign out on this device" : `Sign out ${name}, signed in ${longTime(s.createdAt)}`,
            on: { click: () => this.end(s) },
          }),
        );
      }),
    );
  }

  async end(session) {
    if (session.current) return this.app.signOut();
    try {
      await this.app.api.delete(`/api/auth/sessions/${encodeURIComponent(session.tokenId)}`);
    } catch (error) {
      if (error.code !== "session_not_found") toast(`Not signed out: ${error.message}`);
    }
    this.loadSessions();
  }

  async signOutOthers() {
    const list = await this.app.api.get("/api/auth/sessions").catch(() => []);
    for (const s of list.filter((s) => !s.current)) {
      await this.app.api.delete(`/api/auth/sessions/${encodeURIComponent(s.tokenId)}`).catch(() => {});
    }
    await this.loadSessions();
    this.sessionsStatus.textContent = "Every other session is signed out.";
  }
}

/** The account part of the Settings dialog (made once per sign-in). */
export function accountSettings(app, dialog) {
  if (!app.account || app.account.me !== app.store.me.participantId) {
    if (app.account) app.account.el.remove();
    app.account = new Account(app, dialog);
    app.account.me = app.store.me.participantId;
    app.account.el = dialog.lastElementChild;
  }
  app.account.show();
}

/** The dialog that edits the open room's description. */
export function editRoom(app) {
  const room = app.store.rooms.get(app.currentRoomId);
  if (!room) return;
  const box = h("textarea", { id: "room-description", rows: "4", maxlength: "2000", value: room.description || "" });
  const error = h("p", { class: "error", role: "alert" });
  const dialog = h(
    "dialog",
    { class: "dialog", "aria-labelledby": "room-settings-title", on: { close: () => dialog.remove() } },
    h(
      "header",
      { class: "dialog-head" },
      h("h2", { id: "room-settings-title" }, "Description of #", bdi(room.name)),
      h("button", { type: "button", class: "icon-button", "aria-label": "Close", on: { click: () => dialog.close() } }, icon("close")),
    ),
    h(
      "form",
      {
        class: "stack",
        novalidate: true,
        on: {
          submit: async (event) => {
            event.preventDefault();
            try {
              const data = await app.api.patch(`/api/rooms/${encodeURIComponent(room.roomId)}`, { description: box.value });
              room.update(data);
              if (room.roomId === app.currentRoomId) app.renderRoomHeader(room);
              dialog.close();
            } catch (e) {
              error.textContent = `Not saved: ${e.message}`;
            }
          },
        },
      },
      h("label", { for: box.id, text: "Description" }),
      box,
      error,
      h(
        "p",
        { class: "dialog-buttons" },
        h("button", { type: "button", text: "Cancel", on: { click: () => dialog.close() } }),
        h("button", { type: "submit", class: "primary", text: "Save" }),
      ),
    ),
  );
  document.body.append(dialog);
  dialog.showModal();
  box.focus();
}
