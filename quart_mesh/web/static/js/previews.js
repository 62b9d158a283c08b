// Link previews (decision 0072), loaded when a message with a web link is
// first shown: the node fetches the page and answers a card for the
// message's first link; everything is set as text, and the image comes
// from the node's proxy (never from the linked site).

import { h } from "./dom.js";
import { link } from "./markdown.js";
import { loadStyle } from "./panels.js";

/** messageId + content -> Promise of the preview (or null) */
const asked = new Map();
const MAX_ASKED = 500;
let off = false;

function previewOf(api, message) {
  const key = `${message.roomId}/${message.messageId}\n${message.content}`;
  let found = asked.get(key);
  if (!found) {
    const path = `/api/rooms/${encodeURIComponent(message.roomId)}/messages/${encodeURIComponent(message.messageId)}/preview`;
    found = api.get(path).then(
      (answer) => answer.preview,
      (error) => {
        if (error.code === "link_previews_off") off = true;
        asked.delete(key); // asked again when next shown
        return null;
      },
    );
    if (asked.size >= MAX_ASKED) asked.delete(asked.keys().next().value);
    asked.set(key, found);
  }
  return found;
}

function card(preview) {
  const title = preview.title || preview.siteName || preview.url;
  const a = link(preview.url, title);
  a.className = "link-card-title";
  return h(
    "div",
    { class: "link-card", role: "group", "aria-label": `Link preview: ${title}` },
    preview.image ? h("img", { src: preview.image, alt: "", loading: "lazy", decoding: "async" }) : null,
    h(
      "div",
      { class: "link-card-text" },
      preview.siteName ? h("span", { class: "link-card-site", dir: "auto", text: preview.siteName }) : null,
      a,
      preview.description ? h("p", { class: "link-card-desc", dir: "auto", text: preview.description }) : null,
    ),
  );
}

/** Add the card of *message*'s first link under its body in *el*;
 * *grew* is called when the card (or its image) is in. */
export async function attach(api, message, el, grew) {
  if (off) return;
  const [preview] = await Promise.all([previewOf(api, message), loadStyle("previews.css").catch(() => {})]);
  const body = el.querySelector(":scope > .msg-body");
  if (!preview || !body || el.querySelector(".link-card")) return;
  const shown = card(preview);
  // the message's controls are tab stops only while it is the current one
  const stop = body.querySelector("a[href]")?.getAttribute("tabindex");
  if (stop !== null && stop !== undefined) shown.querySelector("a").setAttribute("tabindex", stop);
  shown.querySelector("img")?.addEventListener("load", grew);
  body.after(shown);
  grew();
}
