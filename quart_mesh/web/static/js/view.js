// What the views (panels.js) are made of: the Panel base class, and the
// fields, lines and tables their forms and lists share (fetched with the
// first view opened: the chat alone never needs them).

import { ApiError } from "./api.js";
import { $, fill, h, toast } from "./dom.js";
import { loadView } from "./panels.js";

// hosting the views in the page (main.js hands over to these once a view is
// first opened: the chat alone never needs them) ---------------------------------

/** Open *view* for the App *app* (its code and styles fetched the first
 * time), unless another route came meanwhile (*load* is not the latest). */
export async function openView(app, view, arg, load) {
  let panel = app.panels.get(view.id);
  if (!panel) {
    try {
      const Kind = await loadView(view);
      panel = app.panels.get(view.id) || new Kind(app);
    } catch (error) {
      if (load === app.panelLoads) {
        fill($("panel-body"), h("p", { class: "error", role: "alert", text: `This view could not be loaded: ${error.message}` }));
      }
      return;
    }
    if (!app.panels.has(view.id)) {
      panel.view = view;
      app.panels.set(view.id, panel);
      if (app.lastSnapshot) panel.onSnapshot(heldSnapshot(app), false);
    }
    if (load !== app.panelLoads || !app.store.me) return;
  }
  showPanel(app, panel, arg);
}

/** A snapshot of what the page holds now (for a view opened late): the
 * participants as events left them, the rooms that still exist. */
function heldSnapshot(app) {
  const rooms = app.lastSnapshot.rooms.filter((room) => app.store.rooms.has(room.roomId));
  return { ...app.lastSnapshot, rooms, participants: [...app.store.participants.values()] };
}

/** Show *panel* in the main area with *arg* (what follows `#id/`). */
export function showPanel(app, panel, arg) {
  app.currentArg = arg;
  if (app.currentPanel !== panel) {
    app.leavePanel();
    app.currentPanel = panel;
  } else if (panel.body) {
    panel.hide();
  }
  app.showViewFrame(panel.view);
  const body = $("panel-body");
  body.replaceChildren();
  panel.body = body;
  const failed = (error) => {
    console.error(error);
    toast(`This view failed: ${error.message}`);
  };
  try {
    Promise.resolve(panel.show(body, arg)).catch(failed);
  } catch (error) {
    failed(error);
  }
  app.sidebar.render();
  app.renderPanelLinks();
  app.renderTitle();
}

/** A view of the main area (its address, title and audience are in VIEWS). */
export class Panel {
  /**
   * @param {object} app the page's App: `app.api` (REST), `app.store` (me,
   *   rooms, participants with their `online` and `position` kept live,
   *   `can(permission)`), `app.live` (the WebSocket: `app.live.send(frame)`
   *   is false while disconnected)
   */
  constructor(app) {
    this.app = app;
    /** the element the panel draws into while shown, else null */
    this.body = null;
  }

  /** Draw into *body* (an empty element under the heading). *arg* is what
   * follows `#id/` in the address ("" when nothing). */
  show(body, arg) {} // eslint-disable-line no-unused-vars

  /** The panel is left (another view is shown). Stop timers and animation. */
  hide() {}

  /** The person signs out: the panel is dropped. End everything it started
   * (streams, requests, timers) and forget what it holds. */
  dispose() {
    this.hide();
  }

  /** Every server event of the live stream, shown or not. */
  onEvent(event) {} // eslint-disable-line no-unused-vars

  /** A snapshot arrived (first connection, or `resumed` after a drop). A
   * view opened later gets one made from what the page holds then. */
  onSnapshot(snapshot, resumed) {} // eslint-disable-line no-unused-vars

  /** Whether this panel is on screen. */
  get shown() {
    return this.body !== null;
  }
}

/** A labelled control: `<label for=…>text</label>` then the input (and an
 * optional hint tied to it with aria-describedby). */
let fieldCount = 0;
export function field(text, input, hint = "") {
  fieldCount += 1;
  const id = input.id || `f${fieldCount}`;
  input.id = id;
  const parts = [h("label", { for: id, text }), input];
  if (hint) {
    const hintId = `${id}-hint`;
    input.setAttribute("aria-describedby", hintId);
    parts.push(h("p", { id: hintId, class: "hint", text: hint }));
  }
  return h("div", { class: "field" }, parts);
}

/** An error line read out when it changes (empty and hidden until then). */
/** Copy *text* to the clipboard and say in *note* whether it could. */
export async function copyText(text, note) {
  try {
    if (!navigator.clipboard || !window.isSecureContext) throw new Error("no clipboard");
    await navigator.clipboard.writeText(text);
    note.textContent = "Copied.";
  } catch {
    note.textContent = "This browser does not let the page copy: select the text and copy it.";
  }
}

export function errorLine() {
  return h("p", { class: "error", role: "alert" });
}

/** A status line for progress ("Deploying…"), read out politely. */
export function statusLine() {
  return h("p", { class: "hint", role: "status" });
}

/** The node's message for a failed call (its `error`), or the exception's. */
export function reason(error) {
  if (error instanceof ApiError) return error.message;
  return error && error.message ? error.message : String(error);
}

/**
 * Run *action* for a button: the button is disabled meanwhile, *errorEl*
 * (an errorLine) is cleared before and says the node's reason on failure.
 * Resolves with the action's result, or undefined when it failed.
 */
export async function guarded(button, errorEl, action) {
  if (button) button.disabled = true;
  if (errorEl) errorEl.textContent = "";
  try {
    return await action();
  } catch (error) {
    if (errorEl) errorEl.textContent = reason(error);
    else throw error;
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

/** A table with a caption, column headings and rows of cells (nodes or
 * text). Tables are how lists of records are shown to screen readers. Its
 * frame scrolls sideways on a narrow screen, so the frame takes the focus
 * (the arrow keys scroll it) and is named after the caption. */
export function table(caption, headings, rows) {
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    h(
      "table",
      { class: "records" },
      h("caption", { text: caption }),
      h("thead", {}, h("tr", {}, headings.map((text) => h("th", { scope: "col", text })))),
      h(
        "tbody",
        {},
        rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell)))),
      ),
    ),
  );
}
