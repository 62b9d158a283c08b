// Read receipts in DMs (docs/decisions/0071-read-receipts.md): "Seen" (by name
// in a group DM) under the newest message of an open DM when it is one's own
// and the other member(s) have read it. Fetched by main.js the first time a DM
// opens; the positions come from `readBy` of GET /api/dms, then live from
// `dm_read`. A person who turns receipts off gets none from the node, so
// nothing shows. readReceiptsToggle() is the setting, for the account settings.

import { $, cursorCompare, h, toast } from "./dom.js";

export class Seen {
  constructor(app) {
    this.app = app;
    this.reads = new Map(); // roomId -> Map(participantId -> cursor)
    this.line = h("p", { id: "seen", class: "seen", hidden: true });
    $("timeline").append(this.line);
    // the timeline's messages come and go (a page loaded, one sent, one
    // deleted, another room shown): say it again for what it shows now
    new MutationObserver(() => this.render()).observe($("message-list"), { childList: true });
  }

  /** Read *room*'s receipts from the node, then show them. */
  async show(room) {
    this.render();
    if (!room.isDm) return;
    let dms;
    try {
      dms = await this.app.api.get("/api/dms");
    } catch {
      return;
    }
    for (const dm of dms) {
      this.reads.set(dm.roomId, new Map((dm.readBy || []).map((r) => [r.participantId, r.cursor])));
    }
    if (room.roomId === this.app.currentRoomId) this.render();
  }

  onEvent(event) {
    if (event.type !== "dm_read") return;
    let reads = this.reads.get(event.roomId);
    if (!reads) this.reads.set(event.roomId, (reads = new Map()));
    const was = reads.get(event.participantId);
    if (!was || cursorCompare(was, event.cursor) < 0) reads.set(event.participantId, event.cursor);
    if (event.roomId === this.app.currentRoomId) this.render();
  }

  /** "Seen" under the open DM's newest message, if it is one's own and read. */
  render() {
    const { store, currentRoomId } = this.app;
    const room = store.rooms.get(currentRoomId);
    const newest = room && room.isDm ? room.sorted.at(-1) : null;
    const me = store.me && store.me.participantId;
    let names = [];
    if (newest && newest.senderId === me) {
      const reads = this.reads.get(room.roomId) || new Map();
      names = [...reads]
        .filter(([id, cursor]) => id !== me && cursorCompare(cursor, newest.cursor) >= 0)
        .map(([id]) => store.nameOf(id));
    }
    const group = room && room.memberCount > 2;
    this.line.textContent = !names.length ? "" : group ? `Seen by ${names.join(", ")}` : "Seen";
    this.line.hidden = !names.length;
  }
}

/** A checkbox "Share read receipts" that reads and changes the setting
 * (PATCH /api/auth/me {readReceipts}); for the account settings. */
export function readReceiptsToggle(app) {
  const box = h("input", { type: "checkbox", id: "read-receipts" });
  box.checked = app.store.me.readReceipts !== false;
  box.addEventListener("change", async () => {
    box.disabled = true;
    try {
      app.store.me = await app.api.patch("/api/auth/me", { readReceipts: box.checked });
    } catch (error) {
      box.checked = !box.checked;
      toast(`Not changed: ${error.message}`);
    } finally {
      box.disabled = false;
    }
  });
  return h(
    "p",
    { class: "read-receipts" },
    box,
    " ",
    h("label", { for: "read-receipts", text: "Share read receipts" }),
    h("span", { class: "hint", text: " Off: others do not see when you read their messages, and you do not see when they read yours." }),
  );
}
