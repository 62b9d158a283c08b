// The room header's "Pinned" and "Edit description", a room's pins and
// their events (the panels: pins.js, settings.js).

import { $, h, toast } from "./dom.js";
import { loadStyle } from "./panels.js";

/** Call *fn* of *name*.js (its .css loaded) with the app and *args*. */
export const run = (app, name, fn, ...args) =>
  Promise.all([import(`./${name}.js`), loadStyle(`${name}.css`)]).then(
    ([m]) => m[fn](app, ...args),
    (e) => toast(e.message),
  );

export function roomTools(app, room) {
  const button = (name, fn) => h("button", { type: "button", class: "small", on: { click: () => run(app, name, fn) } });
  const [pins, edit] = (app.tools ||= [button("pins", "openPins"), button("settings", "editRoom")]);
  $("mute-room").before(pins, edit);
  pins.textContent = room.pins?.size ? `Pinned (${room.pins.size})` : "Pinned";
  pins.hidden = !room.joined;
  edit.textContent = "Edit description";
  edit.hidden = room.isDm || room.origin || !(room.createdBy === app.store.me.participantId || app.roomCan(room, "rooms.permissions"));
  if (room.joined && room.pins === undefined) {
    room.pins = null; // (being read)
    app.api.get(`/api/rooms/${room.roomId}/pins`).then(
      (pins) => roomChanged(app, { roomId: room.roomId, pins }),
      () => (room.pins = undefined),
    );
  }
}

/** room_updated, message_pinned, message_unpinned (and the pins read). */
export function roomChanged(app, e) {
  const room = app.store.rooms.get(e.roomId);
  if (!room) return;
  if (e.pins) room.pins = new Set(e.pins.map((p) => p.message.messageId));
  else if (e.type === "room_updated") room.description = e.description;
  else if (room.pins) room.pins[e.type === "message_pinned" ? "add" : "delete"](e.messageId);
  app.pinsPanel?.onEvent(e);
  if (room.roomId !== app.currentRoomId) return;
  app.renderRoomHeader(room);
  const message = room.find(e.messageId);
  // (the thread panel's timeline exists once a thread was opened)
  for (const t of [app.timeline, app.thread?.timeline]) {
    if (!t) continue;
    if (e.pins) t.renderAll();
    else if (message && t.views.has(e.messageId)) t.upsert(message);
  }
}
