// The image viewer: an image attachment opened in the page (not the raw file
// in a new tab), with its name and size, Download, Close, and the arrow keys
// (or Previous/Next) through the images the timeline has loaded. A native
// modal <dialog>: Escape closes it and the focus goes back to the image that
// opened it. Loaded when first used (room.js).

import { bdi, formatBytes, h } from "./dom.js";

let dialog = null;

/** Show *images* ([{url, filename, size}]) from *index*; focus back to *opener*. */
export function showImages(images, index, opener) {
  if (!dialog) {
    dialog = h("dialog", { class: "dialog viewer", "aria-labelledby": "viewer-name" });
    dialog.addEventListener("keydown", (event) => {
      if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
        event.preventDefault();
        dialog.step(event.key === "ArrowRight" ? 1 : -1);
      }
    });
    document.body.append(dialog);
  }
  let at = index;
  const many = images.length > 1;
  const show = () => {
    const image = images[at];
    const focused = dialog.contains(document.activeElement) ? document.activeElement.textContent : null;
    dialog.replaceChildren(
      h(
        "div",
        { class: "dialog-head" },
        h("h2", { id: "viewer-name" }, bdi(image.filename)),
        h("span", { class: "hint", text: many ? `${at + 1} of ${images.length}` : "" }),
      ),
      h("img", { class: "viewer-image", src: image.url, alt: image.filename }),
      h(
        "p",
        { class: "dialog-buttons" },
        h("span", { class: "viewer-size", text: formatBytes(image.size) }),
        many ? h("button", { type: "button", text: "Previous", "aria-keyshortcuts": "ArrowLeft", on: { click: () => dialog.step(-1) } }) : null,
        many ? h("button", { type: "button", text: "Next", "aria-keyshortcuts": "ArrowRight", on: { click: () => dialog.step(1) } }) : null,
        h("a", { class: "button", href: image.url, download: image.filename, text: "Download" }),
        h("button", { type: "button", class: "primary", text: "Close", on: { click: () => dialog.close() } }),
      ),
    );
    const twin = [...dialog.querySelectorAll("button, a")].find((el) => el.textContent === focused);
    (twin || dialog.querySelector(".primary")).focus();
  };
  dialog.step = (by) => {
    if (!many) return;
    at = (at + by + images.length) % images.length;
    show();
  };
  dialog.addEventListener(
    "close",
    () => {
      if (opener && opener.isConnected) opener.focus();
    },
    { once: true },
  );
  show();
  if (!dialog.open) dialog.showModal();
  dialog.querySelector(".primary").focus();
}
