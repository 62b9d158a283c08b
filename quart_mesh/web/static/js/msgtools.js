// A message's edit form and its reaction picker, fetched when first used
// (the Timeline of room.js renders them once they are here).

import { h } from "./dom.js";
import { QUICK_REACTIONS } from "./room.js";
import { run } from "./roomtools.js";

/** The quick reactions, and More… (the searchable picker, emoji.js). */
export function pickerView(t, message) {
  return h(
    "div",
    {
      class: "picker",
      role: "group",
      "aria-label": "Choose a reaction",
      on: {
        keydown: (event) => {
          if (event.key === "Escape") {
            event.stopPropagation();
            t.closePicker(message);
          }
        },
      },
    },
    QUICK_REACTIONS.map((emoji) =>
      h("button", {
        type: "button",
        class: "pick",
        "aria-label": `React with ${emoji}`,
        text: emoji,
        on: {
          click: () => {
            t.picking = null;
            t.app.toggleReaction(message, emoji, true);
            t.upsert(message);
            t.focusAction(message.messageId, "Add reaction");
          },
        },
      }),
    ),
    h("button", {
      type: "button",
      class: "pick",
      text: "More…",
      "aria-label": "More reactions",
      on: { click: () => run(t.app, "emoji", "openEmoji", t, message) },
    }),
  );
}

/** The edit box of *message*: Enter or Save saves, Escape or Cancel cancels;
 * then the focus goes back where the edit began. */
export function editForm(t, message) {
  const box = h("textarea", {
    class: "edit-box",
    "aria-label": "Edit message",
    rows: String(Math.min(8, message.content.split("\n").length + 1)),
    value: message.content,
  });
  const error = h("p", { class: "error", role: "alert" });
  const done = (m) => {
    t.editing = null;
    t.upsert(m);
    if (t.editBack) t.editBack.focus();
    else t.focusAction(message.messageId, "Edit message");
  };
  const cancel = () => done(message);
  const save = async () => {
    const content = box.value;
    if (!content.trim()) {
      error.textContent = "A message cannot be empty: delete it instead.";
      return;
    }
    if (content === message.content) return cancel();
    try {
      done(await t.app.editMessage(message, content));
    } catch (e) {
      error.textContent = `Not saved: ${e.message}`;
    }
  };
  const form = h(
    "form",
    { class: "edit-form", on: { submit: (event) => { event.preventDefault(); save(); } } },
    box,
    error,
    h(
      "p",
      { class: "edit-buttons" },
      h("button", { type: "button", text: "Cancel", on: { click: cancel } }),
      h("button", { type: "submit", class: "primary", text: "Save" }),
    ),
  );
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target === box && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      save();
    } else if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      cancel();
    }
  });
  return form;
}
