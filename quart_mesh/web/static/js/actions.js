// What a person does to rooms now and then (join, leave, delete, hide a DM,
// start one, mute, mark all read), and what happens to them rarely (a room
// one may no longer read, a link to a room the page does not hold): fetched
// on first use, never on the chat's first paint. Each takes the page's App.

import { cursorCompare, toast } from "./dom.js";

export async function joinRoom(app, roomId) {
  const data = await app.api.post(`/api/rooms/${encodeURIComponent(roomId)}/join`);
  const room = app.rememberRoom(data);
  room.joined = true;
  room.muted = Boolean(data.muted); // (none kept from before leaving)
  room.permissions = null;
  app.sidebar.render();
  app.go(room.roomId);
}

export async function leaveRoom(app, roomId) {
  const room = app.store.rooms.get(roomId);
  if (!room) return;
  const told = room.membershipTold || 0;
  await app.api.post(`/api/rooms/${encodeURIComponent(roomId)}/leave`);
  // the node's participant_left (and perhaps a join since, from another
  // device) came first: it is what is true now
  if ((room.membershipTold || 0) !== told) return;
  room.joined = false;
  room.muted = false; // the node forgets a mute on leaving
  room.forgetMessages();
  if (roomId === app.currentRoomId) app.showWelcome(`You left ${room.name}.`);
  app.sidebar.render();
}

export async function deleteRoom(app, roomId, name) {
  const { confirmAction } = await import("./dialogs.js");
  const sure = await confirmAction(
    `Delete ${name}?`,
    "The room and all of its messages are deleted for everyone. This cannot be undone.",
    "Delete room",
  );
  if (!sure) return;
  await app.api.delete(`/api/rooms/${encodeURIComponent(roomId)}`);
  app.store.rooms.delete(roomId);
  if (roomId === app.currentRoomId) app.showWelcome(`The room ${name} was deleted.`);
  app.sidebar.render();
}

export async function openDm(app, participantId) {
  const dm = await app.api.post("/api/dms", { participantId });
  app.store.participants.set(dm.participant.participantId, {
    ...app.store.participant(dm.participant.participantId),
    ...dm.participant,
  });
  const room = app.rememberRoom({
    roomId: dm.roomId,
    kind: "dm",
    name: "dm",
    description: "",
    joined: true,
    with: dm.participant.participantId,
  });
  room.hidden = false;
  app.sidebar.render();
  app.go(room.roomId);
}

export async function hideDm(app, roomId) {
  const room = app.store.rooms.get(roomId);
  if (!room) return;
  try {
    await app.api.delete(`/api/dms/${encodeURIComponent(roomId)}`);
  } catch (error) {
    toast(error.message);
    return;
  }
  room.hidden = true;
  if (roomId === app.currentRoomId) {
    app.showWelcome(`The conversation with ${app.store.roomLabel(room)} is hidden until someone writes in it.`);
  }
  app.sidebar.render();
}

/** Mute or unmute a room or DM (stored on the node: every tab and device
 * follows, through `room_muted`). */
export async function toggleMute(app, roomId) {
  const room = app.store.rooms.get(roomId);
  if (!room) return;
  const muted = !room.muted;
  let answer;
  try {
    answer = await app.api.put(`/api/rooms/${encodeURIComponent(roomId)}/mute`, { muted });
  } catch (error) {
    toast(`Not changed: ${error.message}`);
    return;
  }
  room.muted = answer && typeof answer.muted === "boolean" ? answer.muted : muted;
  if (room.roomId === app.currentRoomId) app.renderRoomHeader(room);
  app.renderCounts();
}

/** Mark every room and DM read at its newest message (`POST /api/read-all`). */
export async function markAllRead(app) {
  let answer;
  try {
    answer = await app.api.post("/api/read-all", {});
  } catch (error) {
    toast(`Not marked read: ${error.message}`);
    return;
  }
  for (const item of (answer && answer.rooms) || []) {
    const room = app.store.rooms.get(item.roomId);
    if (!room) continue;
    room.unread = item.unread || 0;
    room.mentions = item.mentions || 0;
    if (item.cursor && cursorCompare(item.cursor, room.markedRead) > 0) room.markedRead = item.cursor;
    if (item.cursor && cursorCompare(item.cursor, room.seenCursor) > 0) room.seenCursor = item.cursor;
  }
  app.renderCounts();
  toast("Everything is marked read.");
}

/** A room rule or one's role changed what one may read: a room one may no
 * longer read goes from the page (its badge too); one that may be read
 * again comes back with the node's state. */
export async function onRoomAccess(app, event) {
  const { store } = app;
  if (!event.readable) {
    const room = store.rooms.get(event.roomId);
    store.rooms.delete(event.roomId);
    if (event.roomId === app.currentRoomId) {
      app.showWelcome(room ? `You may no longer read ${room.name}.` : "You may no longer read this room.");
    }
    if (event.roomId === app.threadRoomId) app.closeThread();
    app.sidebar.render();
    app.renderCounts();
    app.renderTitle();
    return;
  }
  try {
    app.onSnapshot(await app.api.get("/api/state"), true);
  } catch {
    // the next reconnection's snapshot brings it
  }
}

/** A link to a room the page does not hold (a hidden DM, a room joined in
 * another tab): the node says what it is before the link is given up. */
export async function routeToUnknown(app, roomId, target, load) {
  const room = await app.fetchRoom(roomId);
  if (load !== app.panelLoads || !app.store.me) return; // another route came meanwhile
  if (room && room.joined) {
    if (room.isDm) app.unhideDm(room);
    app.openRoom(room, target);
  } else if (room && !room.isDm) {
    app.showWelcome("", room);
  } else {
    history.replaceState(null, "", location.pathname);
    app.openDefault();
  }
}
