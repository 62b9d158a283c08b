// The profile card of a person or bot, opened from a message's author (name
// or avatar): names, kind, role, presence, and "Message" to open the DM.
// A native modal <dialog>: Escape closes it and the focus goes back where it
// was (the name that opened it, where a click focuses it), unless it moved on
// already (dom.js focusBack). Loaded when first used (room.js).

import { ago, bdi, focusBack, h, isBot } from "./dom.js";
import { avatar } from "./room.js";

let dialog = null;

function kindOf(p) {
  if (isBot(p)) return `Bot (${p.type})`;
  return p.type === "guest" ? "Guest" : "Person";
}

/**
 * Show the card of *participantId* (*name*: what the message said, for
 * someone the page does not know), giving the focus back to *opener*.
 */
export function showProfile(app, participantId, name, opener) {
  const { store } = app;
  const p = store.participant(participantId) || { participantId, name, type: "human" };
  if (!dialog) {
    dialog = h("dialog", { class: "dialog profile", "aria-labelledby": "profile-name" });
    document.body.append(dialog);
  }
  let back = opener; // the focus goes back there, unless the DM opened
  const close = () => dialog.close();
  const error = h("p", { class: "error", role: "alert" });
  const rows = [
    ["Kind", kindOf(p)],
    ["Role", p.role],
    ["Status", p.online ? "online" : p.lastSeen ? `last seen ${ago(p.lastSeen)}` : "not seen yet"],
    ["From", p.trustLevel === "federated" ? `another mesh (${p.origin})` : null],
  ].filter(([, value]) => value);
  const canDm = store.can("dms.create") && participantId !== store.me.participantId && p.trustLevel !== "federated";
  dialog.replaceChildren(
    h(
      "div",
      { class: "profile-head" },
      avatar(p.participantId, p.displayName || p.name),
      h(
        "div",
        {},
        h("h2", { id: "profile-name" }, bdi(p.displayName || p.name)),
        h("p", { class: "profile-handle" }, bdi("@" + p.name), participantId === store.me.participantId ? " (you)" : null),
      ),
    ),
    h("dl", { class: "profile-facts" }, rows.map(([term, value]) => [h("dt", { text: term }), h("dd", {}, bdi(value))])),
    error,
    h(
      "p",
      { class: "dialog-buttons" },
      canDm
        ? h("button", {
            type: "button",
            class: "primary",
            text: "Message",
            on: {
              click: async () => {
                try {
                  await app.openDm(participantId);
                  back = null;
                  close();
                } catch (e) {
                  error.textContent = `The conversation could not be opened: ${e.message}`;
                }
              },
            },
          })
        : null,
      h("button", { type: "button", text: "Close", on: { click: close } }),
    ),
  );
  dialog.addEventListener(
    "close",
    () => {
      focusBack(dialog, back);
    },
    { once: true },
  );
  if (!dialog.open) dialog.showModal();
  (dialog.querySelector(".primary") || dialog.querySelector("button")).focus();
}
