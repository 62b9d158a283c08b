// The welcome view (no room open: a new person, a room left or deleted) and
// the guest's banner: fetched when first shown, never on a member's first
// paint of a room.

import { $, bdi, fill, h, toast } from "./dom.js";

let section = null;

/** The view's elements, made once (in the main area, before the others). */
function made(app) {
  if (section) return section;
  const join = h("button", { type: "button", id: "join-default", class: "primary", hidden: true });
  join.addEventListener("click", async () => {
    try {
      await app.joinRoom(join.dataset.roomId);
    } catch (error) {
      toast(`Could not join: ${error.message}`);
    }
  });
  const browse = h("button", { type: "button", id: "welcome-browse", text: "Find a room" });
  browse.addEventListener("click", () => app.dialog("RoomBrowser"));
  section = h(
    "section",
    { id: "welcome", class: "welcome", "aria-labelledby": "welcome-title" },
    h("h1", { id: "welcome-title", text: "Welcome" }),
    h("p", { id: "welcome-notice", class: "notice", role: "status", hidden: true }),
    h("p", { id: "welcome-text" }),
    h("p", { class: "welcome-actions" }, join, browse),
  );
  $("conversation").prepend(section);
  return section;
}

/** The welcome view: an empty mesh never greets anyone; the default room
 * (or *offer*, a room the person followed a link to) is offered. */
export function showWelcome(app, notice = "", offer = null) {
  const { store } = app;
  made(app).hidden = false;
  $("welcome-title").textContent = `Welcome to ${store.status.meshName || "the mesh"}, ${store.me.name}`;
  const noticeEl = $("welcome-notice");
  noticeEl.textContent = notice;
  noticeEl.hidden = !notice;
  const room = offer || store.rooms.get(store.status.defaultRoomId);
  const button = $("join-default");
  if (room && !room.joined && store.can("rooms.join")) {
    button.textContent = `Join ${room.name}`;
    button.dataset.roomId = room.roomId;
    button.hidden = false;
    fill(
      $("welcome-text"),
      offer ? "You are not in " : "Everyone starts in ",
      bdi(room.name),
      offer ? " yet." : ". Join it to see what people are saying, or browse the other rooms.",
    );
  } else {
    button.hidden = true;
    $("welcome-text").textContent = store.joinedRooms().length
      ? "Pick a room from the list, or browse the rooms of this mesh."
      : "Browse the rooms of this mesh and join one to start.";
  }
}

/** A guest is told what their role does not let them do. */
export function renderGuestBanner(app) {
  const { store } = app;
  const banner = $("guest-banner");
  if (!store.me || store.me.kind !== "guest") {
    banner.hidden = true;
    return;
  }
  const missing = [
    ["messages.send", "post messages"],
    ["messages.react", "react"],
    ["files.upload", "share files"],
    ["rooms.create", "create rooms"],
    ["dms.create", "start direct messages"],
  ]
    .filter(([permission]) => !store.can(permission))
    .map(([, what]) => what);
  banner.textContent =
    `You are a guest: you can read and join rooms` +
    (missing.length ? `, but you cannot ${missing.join(", ")}.` : ".") +
    " Sign out and create an account to take part.";
  banner.hidden = false;
}
