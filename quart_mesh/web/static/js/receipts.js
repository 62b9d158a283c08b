// Read receipts in DMs (docs/decisions/0071-read-receipts.md): "Seen" (by name
// in a group) under one's own newest message of the open DM once the others
// read it; from `readBy` of GET /api/dms, then `dm_read`. Loaded by main.js.

import { $, cursorCompare, h, toast } from "./dom.js";

const newer = (a, b) => (a && cursorCompare(a, b) > 0 ? a : b);

export class Seen {
  constructor(app) {
    this.app = app;
    this.reads = new Map(); // roomId -> Map(participantId -> cursor)
    this.line = h("p", { id: "seen", class: "seen", hidden: true });
    $("timeline").append(this.line);
    // messages come and go (a page, a send, a delete, another room): say it again
    new MutationObserver(() => this.render()).observe($("message-list"), { childList: true });
  }

  async show(room) {
    this.render();
    if (!room.isDm) return;
    try {
      // the node's answer is who shares receipts now; a later dm_read may be newer
      for (const dm of await this.app.api.get("/api/dms")) {
        const was = this.reads.get(dm.roomId) || new Map();
        this.reads.set(dm.roomId, new Map(dm.readBy.map((r) => [r.participantId, newer(was.get(r.participantId), r.cursor)])));
      }
    } catch {
      return;
    }
    this.render();
  }

  onEvent(event) {
    if (event.type !== "dm_read") return;
    const reads = this.reads.get(event.roomId) || new Map();
    this.reads.set(event.roomId, reads.set(event.participantId, newer(reads.get(event.participantId), event.cursor)));
    this.render();
  }

  render() {
    const { store, currentRoomId } = this.app;
    const room = store.rooms.get(currentRoomId);
    const newest = room && room.isDm ? room.sorted.at(-1) : null;
    const me = store.me.participantId;
    const names =
      newest && newest.senderId === me
        ? [...(this.reads.get(room.roomId) || [])].filter(([, at]) => cursorCompare(at, newest.cursor) >= 0).map(([id]) => store.nameOf(id))
        : [];
    this.line.textContent = !names.length ? "" : room.memberCount > 2 ? `Seen by ${names.join(", ")}` : "Seen";
    this.line.hidden = !names.length;
  }
}

/** The opt-out for the account settings: a "Share read receipts" checkbox. */
export function readReceiptsToggle(app) {
  const box = h("input", { type: "checkbox", id: "read-receipts", checked: app.store.me.readReceipts });
  // (disabled while saving: a second change waits for the first's answer)
  box.addEventListener("change", async () => {
    box.disabled = true;
    try {
      app.store.me = await app.api.patch("/api/auth/me", { readReceipts: box.checked });
    } catch (error) {
      box.checked = !box.checked;
      toast(error.message);
    } finally {
      box.disabled = false;
    }
  });
  return h("label", { class: "check" }, box, "Share read receipts");
}
