// Dialogs: the room browser (list, join, open, leave, delete, create), the
// new-DM picker, and a confirmation. Native <dialog>: modal, Escape closes,
// focus returns to what opened it.

import { $, bdi, fill, h, isBot } from "./dom.js";
import { loadStyle } from "./panels.js";

function wireClose(dialog) {
  for (const button of dialog.querySelectorAll("[data-close]")) {
    button.addEventListener("click", () => dialog.close());
  }
}

function setError(dialog, text) {
  const el = dialog.querySelector(".error");
  el.textContent = text;
}

/** Ask before something that cannot be undone; resolves true or false. */
export function confirmAction(title, text, action) {
  const dialog = $("confirm-dialog");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = action;
  return new Promise((resolve) => {
    const done = (answer) => {
      $("confirm-ok").removeEventListener("click", ok);
      $("confirm-cancel").removeEventListener("click", cancel);
      dialog.removeEventListener("close", cancel);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const ok = () => done(true);
    const cancel = () => done(false);
    $("confirm-ok").addEventListener("click", ok);
    $("confirm-cancel").addEventListener("click", cancel);
    dialog.addEventListener("close", cancel);
    dialog.showModal();
    $("confirm-cancel").focus();
  });
}

export class RoomBrowser {
  constructor(app) {
    this.app = app;
    this.dialog = $("room-browser");
    wireClose(this.dialog);
    $("create-room-form").addEventListener("submit", (event) => this.create(event));
  }

  async open() {
    setError(this.dialog, "");
    this.pages = 1;
    $("create-room-form").hidden = !this.app.store.can("rooms.create");
    fill($("room-browser-list"), h("li", { class: "hint", text: "Loading rooms…" }));
    this.dialog.showModal();
    await this.refresh();
  }

  /** The first page of rooms again (after a change), as many pages as were shown. */
  async refresh() {
    const pages = Math.max(1, this.pages || 1);
    this.rooms = [];
    this.cursor = null;
    this.pages = 0;
    for (let i = 0; i < pages; i++) {
      if (!(await this.more())) return;
      if (this.cursor === null) break;
    }
    this.render(this.rooms);
  }

  /** The next page of rooms (GET /api/rooms pages by name); false if it failed. */
  async more() {
    let page;
    try {
      page = await this.app.api.roomPage(this.cursor);
    } catch (error) {
      setError(this.dialog, `The rooms could not be loaded: ${error.message}`);
      return false;
    }
    for (const data of page.rooms) this.app.rememberRoom(data);
    this.rooms.push(...page.rooms);
    this.cursor = page.nextCursor;
    this.pages += 1;
    return true;
  }

  render(rooms) {
    const { store } = this.app;
    const me = store.me.participantId;
    const defaultRoom = store.status && store.status.defaultRoomId;
    const items = rooms.map((data) => {
      const room = store.rooms.get(data.roomId);
      const joined = room ? room.joined : data.joined;
      const name = data.name;
      const canDelete =
        (store.can("rooms.delete") || data.createdBy === me) && data.roomId !== defaultRoom;
      const buttons = [];
      if (joined) {
        buttons.push(
          h("button", {
            type: "button",
            text: "Open",
            "aria-label": `Open ${name}`,
            on: { click: () => { this.dialog.close(); this.app.go(data.roomId); } },
          }),
          h("button", {
            type: "button",
            text: "Leave",
            "aria-label": `Leave ${name}`,
            on: { click: () => this.act(() => this.app.leaveRoom(data.roomId)) },
          }),
        );
      } else if (store.can("rooms.join")) {
        buttons.push(
          h("button", {
            type: "button",
            class: "primary",
            text: "Join",
            "aria-label": `Join ${name}`,
            on: {
              click: () =>
                this.act(async () => {
                  await this.app.joinRoom(data.roomId);
                  this.dialog.close();
                }),
            },
          }),
        );
      }
      if (canDelete) {
        buttons.push(
          h("button", {
            type: "button",
            class: "danger",
            text: "Delete",
            "aria-label": `Delete ${name}`,
            on: { click: () => this.act(() => this.app.deleteRoom(data.roomId, name)) },
          }),
        );
      }
      return h(
        "li",
        { class: "room-row" },
        h(
          "div",
          { class: "room-row-main" },
          h("span", { class: "room-row-name" }, "#", bdi(name)),
          data.roomId === defaultRoom ? h("span", { class: "badge", text: "default" }) : null,
          data.origin ? h("span", { class: "badge federated", title: data.origin, text: "shared" }) : null,
          h("span", {
            class: "hint",
            text: ` ${data.memberCount} member${data.memberCount === 1 ? "" : "s"}`,
          }),
          data.description ? h("p", { class: "room-row-description", dir: "auto", text: data.description }) : null,
        ),
        h("div", { class: "room-row-actions" }, buttons),
      );
    });
    if (this.cursor !== null) {
      items.push(
        h(
          "li",
          { class: "room-row" },
          h("button", {
            type: "button",
            text: "More rooms",
            on: {
              click: async () => {
                setError(this.dialog, "");
                const shown = this.rooms.length;
                if (!(await this.more())) return;
                this.render(this.rooms);
                // on to the first room of the new page
                const row = $("room-browser-list").querySelectorAll(".room-row")[shown];
                const button = row && row.querySelector("button");
                if (button) button.focus();
              },
            },
          }),
        ),
      );
    }
    fill(
      $("room-browser-list"),
      items.length ? items : h("li", { class: "hint", text: "There are no rooms yet." }),
    );
  }

  async act(action) {
    setError(this.dialog, "");
    try {
      await action();
    } catch (error) {
      setError(this.dialog, error.message);
    }
    if (this.dialog.open) await this.refresh();
  }

  async create(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const name = $("create-room-name").value.trim();
    const description = $("create-room-description").value;
    if (!name) {
      setError(this.dialog, "A room needs a name.");
      $("create-room-name").focus();
      return;
    }
    setError(this.dialog, "");
    try {
      const room = await this.app.api.post("/api/rooms", { name, description });
      this.app.rememberRoom(room);
      form.reset();
      this.dialog.close();
      this.app.go(room.roomId);
    } catch (error) {
      setError(
        this.dialog,
        error.code === "room_name_taken" ? "A room with that name exists already." : error.message,
      );
      $("create-room-name").focus();
    }
  }
}

export class DmPicker {
  constructor(app) {
    this.app = app;
    this.dialog = $("dm-picker");
    wireClose(this.dialog);
    $("dm-search").addEventListener("input", () => this.render());
    loadStyle("dms.css").catch(() => {});
    // people ticked (id -> name): one conversation with them all (decision 0070)
    this.picked = new Map();
    this.group = h("button", { type: "button", class: "primary dm-group", on: { click: () => this.openGroup() } });
    $("dm-search").after(h("p", { id: "dm-group-hint", class: "hint", text: "Tick 2 to 8 people for a group conversation." }));
    $("dm-candidates").after(this.group);
  }

  async open() {
    setError(this.dialog, "");
    this.pages = 1;
    this.picked.clear();
    this.renderGroup();
    $("dm-search").value = "";
    this.dialog.showModal();
    $("dm-search").focus();
    try {
      const everyone = await this.app.api.get("/api/participants");
      for (const p of everyone) this.app.store.participants.set(p.participantId, p);
    } catch (error) {
      setError(this.dialog, error.message);
    }
    this.render();
  }

  render() {
    const { store } = this.app;
    const query = $("dm-search").value.trim().toLowerCase();
    const me = store.me.participantId;
    const people = [...store.participants.values()]
      .filter((p) => p.participantId !== me && p.trustLevel !== "federated")
      .filter((p) => !query || p.name.toLowerCase().includes(query))
      .sort((a, b) => a.name.localeCompare(b.name))
      .slice(0, 50);
    fill(
      $("dm-candidates"),
      people.length
        ? people.map((p) =>
            h(
              "li",
              {},
              h("input", {
                type: "checkbox",
                "aria-label": `Add ${p.name} to a group conversation`,
                "aria-describedby": "dm-group-hint",
                checked: this.picked.has(p.participantId),
                on: {
                  change: (event) => {
                    this.picked[event.target.checked ? "set" : "delete"](p.participantId, p.name);
                    this.renderGroup();
                  },
                },
              }),
              h(
                "button",
                {
                  type: "button",
                  class: "candidate",
                  "aria-label": `Message ${p.name}`,
                  on: {
                    click: async () => {
                      try {
                        await this.app.openDm(p.participantId);
                        this.dialog.close();
                      } catch (error) {
                        setError(this.dialog, error.message);
                      }
                    },
                  },
                },
                h("span", { class: p.online ? "dot online" : "dot", "aria-hidden": "true" }),
                bdi(p.name),
                isBot(p) ? h("span", { class: "badge bot", text: "bot" }) : null,
              ),
            ),
          )
        : h("li", { class: "hint", text: "Nobody matches." }),
    );
  }

  renderGroup() {
    this.group.hidden = this.picked.size < 2;
    this.group.textContent = `Start a conversation with ${[...this.picked.values()].join(", ")}`;
  }

  async openGroup() {
    const { app } = this;
    try {
      const dm = await app.api.post("/api/dms", { participantIds: [...this.picked.keys()] });
      const room = app.rememberRoom({ ...dm, kind: "dm", joined: true, memberCount: dm.members.length });
      room.hidden = false;
      this.dialog.close();
      app.sidebar.render();
      app.go(room.roomId);
    } catch (error) {
      setError(this.dialog, error.message); // (more than 8: the node says so)
    }
  }
}
