// What a click in the timeline opens, loaded when first used (room.js):
// Copy on a code block, the profile card (profile.js) from a name or an
// avatar, the image viewer (viewer.js) from an image.

import { loadStyle } from "./panels.js";

const IMAGES = /^image\/(png|jpeg|gif|webp|avif)$/;

/** *el* was clicked in *timeline* (a Timeline of room.js). */
export async function clicked(timeline, el) {
  const msg = el.closest(".msg");
  if (el.matches(".copy")) {
    const said = await navigator.clipboard.writeText(el.previousSibling.textContent).then(
      () => "Copied",
      () => "Not copied",
    );
    el.textContent = said;
    setTimeout(() => (el.textContent = "Copy"), 2000);
  } else if (el.tagName === "A") {
    // (a thread's root is shown above its replies)
    const root = timeline.inThread && timeline.room.find(timeline.threadId);
    const images = (root ? [root, ...timeline.messages()] : timeline.messages())
      .flatMap((m) => (m.attachments || []).filter((a) => IMAGES.test(a.contentType) && String(a.url).startsWith("/uploads/")));
    const [{ showImages }] = await Promise.all([import("./viewer.js"), loadStyle("viewer.css")]);
    showImages(images, Math.max(0, images.findIndex((a) => a.url === el.getAttribute("href"))), el);
  } else {
    const [{ showProfile }] = await Promise.all([import("./profile.js"), loadStyle("profile.css")]);
    const name = msg.querySelector(".msg-sender").textContent;
    showProfile(timeline.app, msg.dataset.sender, name, msg.querySelector(".who") || el);
  }
}
