// The sidebar: joined rooms and DMs with unread and mention badges, and the
// people of the mesh with online dots, last seen, and bot/federated badges.

import { $, ago, bdi, fill, h, icon, isBot, refill, shortDid } from "./dom.js";

const PEOPLE_SHOWN = 100;

/** "Town Square, 3 unread messages, 1 mention" */
function roomLinkLabel(label, room) {
  const parts = [label];
  if (room.muted) parts.push("muted");
  if (room.unread) parts.push(`${room.unread} unread message${room.unread === 1 ? "" : "s"}`);
  if (room.mentions) parts.push(`${room.mentions} mention${room.mentions === 1 ? "" : "s"}`);
  return parts.join(", ");
}

function badges(room) {
  return h(
    "span",
    { class: "badges", "aria-hidden": "true" },
    room.muted ? h("span", { class: "badge muted-mark", title: "muted", text: "muted" }) : null,
    room.mentions ? h("span", { class: "badge mention", text: `@${room.mentions}` }) : null,
    room.unread ? h("span", { class: "badge unread", text: String(room.unread) }) : null,
  );
}

function navClass(room) {
  return `nav-item${room.unread ? " unread" : ""}${room.muted ? " muted" : ""}`;
}

export function participantBadges(participant) {
  if (!participant) return [];
  const out = [];
  if (isBot(participant)) {
    out.push(h("span", { class: "badge bot", title: `bot (${participant.type})`, text: "bot" }));
  }
  if (participant.trustLevel === "federated") {
    out.push(
      h("span", {
        class: "badge federated",
        title: `from another mesh: ${participant.origin}`,
        text: `federated · ${shortDid(participant.origin)}`,
      }),
    );
  }
  if (participant.type === "guest") out.push(h("span", { class: "badge guest", text: "guest" }));
  return out;
}

export class Sidebar {
  constructor(app) {
    this.app = app;
    this.showAllPeople = false;
  }

  render() {
    this.renderRooms();
    this.renderDms();
    this.renderPeople();
  }

  renderRooms() {
    const { store, currentRoomId } = this.app;
    const rooms = store.joinedRooms();
    $("no-rooms").hidden = rooms.length > 0;
    refill(
      $("room-list"),
      rooms.map((room) =>
        h(
          "li",
          {},
          h(
            "a",
            {
              class: navClass(room),
              href: `#room/${room.roomId}`,
              "aria-current": room.roomId === currentRoomId ? "page" : null,
              "aria-label": roomLinkLabel(room.name, room),
              dataset: { roomId: room.roomId },
            },
            h("span", { class: "hash", "aria-hidden": "true", text: "#" }),
            bdi(room.name, "nav-name"),
            badges(room),
          ),
        ),
      ),
    );
  }

  renderDms() {
    const { store, currentRoomId } = this.app;
    const dms = store.dms();
    refill(
      $("dm-list"),
      dms.map((room) => {
        const other = store.participant(room.with);
        const label = store.roomLabel(room);
        return h(
          "li",
          { class: "dm-item" },
          h(
            "a",
            {
              class: navClass(room),
              href: `#room/${room.roomId}`,
              "aria-current": room.roomId === currentRoomId ? "page" : null,
              "aria-label": roomLinkLabel(`Direct messages with ${label}`, room),
              dataset: { roomId: room.roomId },
            },
            h("span", {
              class: other && other.online ? "dot online" : "dot",
              "aria-hidden": "true",
            }),
            bdi(label, "nav-name"),
            badges(room),
          ),
          h(
            "button",
            {
              type: "button",
              class: "icon-button hide-dm",
              "aria-label": `Hide conversation with ${label}`,
              title: "Hide conversation",
              on: { click: () => this.app.hideDm(room.roomId) },
            },
            icon("close"),
          ),
        );
      }),
    );
  }

  renderPeople() {
    const { store } = this.app;
    const me = store.me.participantId;
    const people = [...store.participants.values()].sort((a, b) => {
      if (a.online !== b.online) return a.online ? -1 : 1;
      return a.name.localeCompare(b.name, undefined, { sensitivity: "base" });
    });
    const online = people.filter((p) => p.online).length;
    $("online-count").textContent = `${online} online`;
    const shown = this.showAllPeople ? people : people.slice(0, PEOPLE_SHOWN);
    const canDm = store.can("dms.create");
    const items = shown.map((p) =>
      h(
        "li",
        { class: "person", dataset: { participantId: p.participantId } },
        h("span", {
          class: p.online ? "dot online" : "dot",
          role: "img",
          "aria-label": p.online ? "online" : "offline",
        }),
        h(
          "span",
          { class: "person-main" },
          h("span", { class: "person-name" }, bdi(p.name), p.participantId === me ? " (you)" : null),
          participantBadges(p),
          h("span", {
            class: "seen",
            text: p.online ? "online" : p.lastSeen ? `last seen ${ago(p.lastSeen)}` : "not seen yet",
          }),
        ),
        canDm && p.participantId !== me && p.trustLevel !== "federated"
          ? h(
              "button",
              {
                type: "button",
                class: "icon-button",
                "aria-label": `Send ${p.name} a direct message`,
                title: "Direct message",
                on: { click: () => this.app.openDm(p.participantId) },
              },
              icon("mail"),
            )
          : null,
      ),
    );
    if (people.length > shown.length) {
      items.push(
        h(
          "li",
          {},
          h("button", {
            type: "button",
            class: "link",
            text: `Show all ${people.length} people`,
            on: {
              click: () => {
                this.showAllPeople = true;
                this.renderPeople();
              },
            },
          }),
        ),
      );
    }
    fill($("people-list"), items);
  }
}
