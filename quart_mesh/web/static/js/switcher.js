// The room switcher (Ctrl/Cmd+K): a dialog with a combobox and the list of
// one's rooms and conversations, filtered as one types, unread ones first.
// Enter opens the active one, Escape closes. Fetched on first use.

import { focusBack, h } from "./dom.js";

const SHOWN = 50;

/** Lower case, without accents: "Café" matches "cafe". */
const fold = (text) => text.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();

export class Switcher {
  constructor(app) {
    this.app = app;
    this.items = [];
    this.active = 0;
    this.returnTo = null;
    this.input = h("input", {
      type: "text",
      id: "switcher-input",
      role: "combobox",
      "aria-expanded": "true",
      "aria-controls": "switcher-list",
      "aria-autocomplete": "list",
      "aria-label": "Room or conversation",
      autocomplete: "off",
      spellcheck: "false",
      placeholder: "Go to…",
    });
    this.list = h("ul", { id: "switcher-list", class: "switcher-list", role: "listbox", "aria-label": "Rooms and conversations" });
    this.empty = h("p", { class: "hint", role: "status" });
    this.dialog = h(
      "dialog",
      { class: "dialog switcher", "aria-labelledby": "switcher-title" },
      h("h2", { id: "switcher-title", text: "Go to a room or conversation" }),
      this.input,
      this.list,
      this.empty,
    );
    this.input.addEventListener("input", () => {
      this.active = 0;
      this.render();
    });
    this.input.addEventListener("keydown", (event) => this.onKey(event));
    // (a click on an option: the input keeps the focus)
    this.list.addEventListener("mousedown", (event) => event.preventDefault());
    this.dialog.addEventListener("close", () => {
      const back = this.returnTo;
      this.returnTo = null;
      if (!this.going) focusBack(this.dialog, back);
      this.going = false;
    });
    document.body.append(this.dialog);
  }

  open() {
    if (this.dialog.open) return;
    this.returnTo = document.activeElement;
    this.input.value = "";
    this.active = 0;
    this.render();
    this.dialog.showModal();
    this.input.focus();
  }

  /** One's rooms and shown conversations matching the text typed, unread
   * first (mentions before them), then by name. */
  matches() {
    const { store } = this.app;
    const query = fold(this.input.value.trim().replace(/^#/, ""));
    const rooms = [...store.joinedRooms(), ...store.dms()].map((room) => ({
      room,
      label: room.isDm ? store.roomLabel(room) : `#${room.name}`,
      name: room.isDm ? store.roomLabel(room) : room.name,
    }));
    return rooms
      .filter((item) => !query || fold(item.name).includes(query))
      .sort(
        (a, b) =>
          Number(Boolean(b.room.mentions)) - Number(Boolean(a.room.mentions)) ||
          Number(Boolean(b.room.unread)) - Number(Boolean(a.room.unread)) ||
          a.name.localeCompare(b.name, undefined, { sensitivity: "base" }),
      )
      .slice(0, SHOWN);
  }

  render() {
    this.items = this.matches();
    if (this.active >= this.items.length) this.active = Math.max(0, this.items.length - 1);
    this.list.replaceChildren(
      ...this.items.map((item, i) => {
        const { room } = item;
        const counts = [];
        if (room.unread) counts.push(`${room.unread} unread`);
        if (room.mentions) counts.push(`${room.mentions} mention${room.mentions === 1 ? "" : "s"}`);
        const option = h(
          "li",
          {
            id: `switcher-option-${i}`,
            class: "switcher-option",
            role: "option",
            "aria-selected": i === this.active ? "true" : "false",
          },
          h("bdi", { text: item.label }),
          counts.length ? h("span", { class: "hint", text: `, ${counts.join(", ")}` }) : null,
        );
        option.addEventListener("click", () => this.go(room));
        return option;
      }),
    );
    const current = this.items.length ? `switcher-option-${this.active}` : null;
    if (current) this.input.setAttribute("aria-activedescendant", current);
    else this.input.removeAttribute("aria-activedescendant");
    this.empty.textContent = this.items.length ? "" : "No room or conversation matches.";
    const el = current && this.list.querySelector(`#${current}`);
    if (el) el.scrollIntoView({ block: "nearest" });
  }

  onKey(event) {
    const count = this.items.length;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (!count) return;
      this.active = (this.active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
      this.render();
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      this.active = event.key === "Home" ? 0 : Math.max(0, count - 1);
      this.render();
    } else if (event.key === "Enter") {
      event.preventDefault();
      if (count) this.go(this.items[this.active].room);
    }
  }

  go(room) {
    this.going = room.roomId !== this.app.currentRoomId; // (the room takes the focus)
    this.dialog.close();
    this.app.go(room.roomId);
  }
}
