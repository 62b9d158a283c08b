// The message box's parts fetched when first used (composer.js): the
// suggestions of names after `@`, and uploads with their progress.

import { bdi, formatBytes, h, icon } from "./dom.js";
import { MENTION_AT_CARET } from "./composer.js";

const MAX_SUGGESTIONS = 8;

// mentions -------------------------------------------------------------------

export function suggest(c) {
  const before = c.box.value.slice(0, c.box.selectionStart);
  const match = MENTION_AT_CARET.exec(before);
  if (!match) return closeSuggestions(c);
  const query = match[1].toLowerCase();
  const me = c.app.store.me.participantId;
  c.suggestions = [...c.app.store.participants.values()]
    .filter((p) => p.participantId !== me && p.name.toLowerCase().startsWith(query))
    .sort((a, b) => (a.online === b.online ? a.name.localeCompare(b.name) : a.online ? -1 : 1))
    .slice(0, MAX_SUGGESTIONS);
  if (!c.suggestions.length) return closeSuggestions(c);
  c.active = 0;
  renderSuggestions(c);
}

export function renderSuggestions(c) {
  c.listbox.replaceChildren(
    ...c.suggestions.map((p, i) =>
      h(
        "li",
        {
          id: `${c.id}-option-${i}`,
          role: "option",
          class: i === c.active ? "active" : null,
          "aria-selected": i === c.active ? "true" : "false",
          on: {
            mousedown: (event) => {
              event.preventDefault();
              choose(c, p);
            },
          },
        },
        bdi(p.name),
        p.online ? h("span", { class: "hint", text: " online" }) : null,
      ),
    ),
  );
  c.listbox.hidden = false;
  c.box.setAttribute("aria-activedescendant", `${c.id}-option-${c.active}`);
}

export function closeSuggestions(c) {
  c.listbox.hidden = true;
  c.suggestions = [];
  c.box.removeAttribute("aria-activedescendant");
}

export function choose(c, participant) {
  const caret = c.box.selectionStart;
  const before = c.box.value.slice(0, caret);
  const match = MENTION_AT_CARET.exec(before);
  if (!match) return closeSuggestions(c);
  const start = caret - match[1].length;
  const inserted = `${participant.name} `;
  c.box.value = c.box.value.slice(0, start) + inserted + c.box.value.slice(caret);
  const at = start + inserted.length;
  c.box.setSelectionRange(at, at);
  c.mentioned.set(participant.name.toLowerCase(), participant.participantId);
  closeSuggestions(c);
  c.box.focus();
}

// uploads ----------------------------------------------------------------------

export function startUpload(c, file) {
  const item = { file, progress: 0, result: null, error: null, controller: new AbortController() };
  c.uploads.push(item);
  renderUploads(c);
  c.app.api
    .upload(file, (fraction) => {
      item.progress = fraction;
      renderUploads(c);
    }, item.controller.signal)
    .then((result) => {
      item.result = result;
      renderUploads(c);
    })
    .catch((error) => {
      if (error.code === "aborted") return;
      item.error = error.message;
      renderUploads(c);
    });
}

export function renderUploads(c) {
  c.uploadList.hidden = c.uploads.length === 0;
  c.uploadList.replaceChildren(
    ...c.uploads.map((item) => {
      const name = item.file.name || "pasted file";
      const state = item.error
        ? h("span", { class: "error", text: `not uploaded: ${item.error}` })
        : item.result
          ? h("span", { class: "hint", text: `${formatBytes(item.result.size)}, ready` })
          : h("progress", {
              max: "1",
              value: String(item.progress),
              "aria-label": `Uploading ${name}`,
            });
      return h(
        "li",
        { class: "upload" },
        icon("file"),
        bdi(name),
        " ",
        state,
        h(
          "button",
          {
            type: "button",
            class: "icon-button",
            "aria-label": `Remove ${name}`,
            on: {
              click: () => {
                item.controller.abort();
                c.uploads = c.uploads.filter((u) => u !== item);
                renderUploads(c);
                c.box.focus();
              },
            },
          },
          icon("close"),
        ),
      );
    }),
  );
}

/** Upload *files* (chosen or pasted). */
export function startUploads(c, files) {
  for (const file of files) startUpload(c, file);
}
