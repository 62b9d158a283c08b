// The room's pinned messages (fetched when first opened from the room's
// "Pinned" button): a dialog listing them, the latest pin first, each with
// "Jump to message" and, for those who may post there, "Unpin"; kept live by
// message_pinned and message_unpinned (roomtools.js).

import { bdi, h, icon, longTime, shortTime, toast } from "./dom.js";
import { render } from "./markdown.js";
import { roomChanged } from "./roomtools.js";

/** Pin or unpin *message* (the node tells the room). */
export async function pin(app, message, on) {
  const path = `/api/rooms/${encodeURIComponent(message.roomId)}/pins/${encodeURIComponent(message.messageId)}`;
  try {
    await (on ? app.api.put(path) : app.api.delete(path));
  } catch (error) {
    toast(`Not ${on ? "pinned" : "unpinned"}: ${error.message}`);
    return;
  }
  roomChanged(app, { type: on ? "message_pinned" : "message_unpinned", roomId: message.roomId, messageId: message.messageId });
}

class PinsPanel {
  constructor(app) {
    this.app = app;
    this.room = null;
    this.list = h("ul", { class: "pins-list", "aria-labelledby": "pins-title" });
    this.status = h("p", { class: "hint", role: "status" });
    this.dialog = h(
      "dialog",
      { class: "dialog wide pins-dialog", "aria-labelledby": "pins-title" },
      h(
        "header",
        { class: "dialog-head" },
        h("h2", { id: "pins-title", text: "Pinned messages" }),
        h(
          "button",
          { type: "button", class: "icon-button", "aria-label": "Close pinned messages", on: { click: () => this.dialog.close() } },
          icon("close"),
        ),
      ),
      this.status,
      this.list,
    );
    document.body.append(this.dialog);
  }

  open(room) {
    this.room = room;
    this.list.replaceChildren();
    this.dialog.showModal();
    this.refresh();
  }

  async refresh() {
    const room = this.room;
    if (!this.list.children.length) this.status.textContent = "Loading…";
    let pins;
    try {
      pins = await this.app.api.get(`/api/rooms/${encodeURIComponent(room.roomId)}/pins`);
    } catch (error) {
      this.status.textContent = `The pinned messages could not be loaded: ${error.message}`;
      return;
    }
    if (room !== this.room) return;
    this.status.textContent = pins.length
      ? `${pins.length} pinned message${pins.length === 1 ? "" : "s"}`
      : "Nothing is pinned here yet. Pin a message from its actions.";
    this.list.replaceChildren(...pins.map((p) => this.item(p)));
  }

  item({ message, pinnedBy, pinnedAt }) {
    const { app } = this;
    const { store } = app;
    const head = `pin-${message.messageId}`;
    return h(
      "li",
      { class: "pin" },
      h(
        "article",
        { "aria-labelledby": head },
        h(
          "p",
          { class: "msg-head", id: head },
          bdi(message.senderName, "msg-sender"),
          " ",
          h("time", { datetime: message.timestamp, title: longTime(message.timestamp), text: shortTime(message.timestamp) }),
        ),
        h(
          "div",
          { class: "msg-body", dir: "auto" },
          render(message.content, { isName: (name) => store.isName(name), me: store.me.name }),
        ),
        h("p", { class: "hint" }, "Pinned by ", bdi(store.nameOf(pinnedBy)), ` ${longTime(pinnedAt)}`),
        h(
          "p",
          { class: "pin-actions" },
          h("button", {
            type: "button",
            text: "Jump to message",
            on: {
              click: () => {
                this.dialog.close();
                app.openMessage(message.roomId, message.messageId);
              },
            },
          }),
          app.roomCan(this.room, "messages.send")
            ? h("button", { type: "button", text: "Unpin", on: { click: () => pin(app, message, false) } })
            : null,
        ),
      ),
    );
  }

  /** A pin or unpin in the room shown: read the list again. */
  onEvent(event) {
    if (this.dialog.open && this.room && event.roomId === this.room.roomId && event.type !== "room_updated") {
      this.refresh();
    }
  }
}

/** Open the pinned messages of the room shown. */
export function openPins(app) {
  const room = app.store.rooms.get(app.currentRoomId);
  if (!room) return;
  app.pinsPanel ||= new PinsPanel(app);
  app.pinsPanel.open(room);
}
