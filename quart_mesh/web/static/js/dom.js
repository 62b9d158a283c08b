// Small DOM helpers. Everything the client shows is built with these from
// elements and text nodes: no string ever becomes HTML (the page's CSP
// enforces it with Trusted Types).

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/**
 * Build an element. `attrs` keys: `class`, `text` (text content), `dataset`
 * (object), `on` (object of event handlers), `hidden`, any `aria-*`/other
 * attribute (strings; `false`/`null` leave it out, `true` sets it empty).
 * Children: nodes, strings (as text), arrays, and null/undefined (skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "on") {
      for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
    } else if (key === "hidden") el.hidden = Boolean(value);
    else if (key === "value") el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else el.append(document.createTextNode(String(child)));
  }
}

const SVG = "http://www.w3.org/2000/svg";
const ICONS = {
  attach:
    "M16.5 6v11.5a4 4 0 0 1-8 0V5a2.5 2.5 0 0 1 5 0v10.5a1 1 0 0 1-2 0V6H10v9.5a2.5 2.5 0 0 0 5 0V5a4 4 0 0 0-8 0v12.5a5.5 5.5 0 0 0 11 0V6z",
  close: "M19 6.4 17.6 5 12 10.6 6.4 5 5 6.4 10.6 12 5 17.6 6.4 19 12 13.4 17.6 19 19 17.6 13.4 12z",
  mail: "M20 4H4a2 2 0 0 0-2 2v12a2 2 0 0 0 2 2h16a2 2 0 0 0 2-2V6a2 2 0 0 0-2-2zm0 4-8 5-8-5V6l8 5 8-5z",
  file: "M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8zm-1 7V3.5L18.5 9z",
};

/** A decorative icon (hidden from assistive technology: its button has a name). */
export function icon(name) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", "icon");
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("fill", "currentColor");
  path.setAttribute("d", ICONS[name]);
  svg.append(path);
  return svg;
}

/** Text isolated from its surroundings (names, room names: bidi-safe). */
export function bdi(text, className) {
  return h("bdi", { class: className }, text);
}

/** A dialog closed: the focus goes back to *back*, unless it is elsewhere
 * already (a busy browser handles input queued before the close event: a
 * shortcut pressed right after Escape keeps the focus it took). */
export function focusBack(dialog, back) {
  const now = document.activeElement;
  const unplaced = !now || now === document.body || dialog.contains(now);
  if (back && back.isConnected && unplaced) back.focus();
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** Keep equal children in place (a click across a redraw still lands). */
export function refill(el, items) {
  const old = [...el.children];
  if (old.length !== items.length) return el.replaceChildren(...items);
  old.forEach((c, i) => c.isEqualNode(items[i]) || c.replaceWith(items[i]));
}

/** Participant types that are bots (anything but humans and guests). */
export function isBot(participant) {
  return Boolean(participant) && participant.type !== "human" && participant.type !== "guest";
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
});
const dayFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

/** "14:05" today, "Nov 21, 14:05" on other days. */
export function shortTime(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  const now = new Date();
  if (when.toDateString() === now.toDateString()) return timeFormat.format(when);
  return `${dayFormat.format(when)}, ${timeFormat.format(when)}`;
}

export function longTime(iso) {
  return iso ? dateTimeFormat.format(new Date(iso)) : "";
}

/** "5 minutes ago", "yesterday"… */
export function ago(iso) {
  if (!iso) return "never";
  const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
  const steps = [
    [60, "second"],
    [60, "minute"],
    [24, "hour"],
    [7, "day"],
    [4.35, "week"],
    [12, "month"],
    [Infinity, "year"],
  ];
  let value = seconds;
  for (const [size, unit] of steps) {
    if (Math.abs(value) < size) {
      if (unit === "second") return "just now";
      return relativeFormat.format(Math.round(value), unit);
    }
    value /= size;
  }
  return longTime(iso);
}

/** Bytes in human units: 3 significant digits, the unit chosen after
 * rounding (1048575 is "1 MB", not "1024 KB"); *extra* adds decimals. */
export function formatBytes(n, extra = 0) {
  let unit = 0;
  while (unit < 3 && n >= 1024 ** (unit + 1)) unit += 1;
  for (;;) {
    const value = n / 1024 ** unit;
    const text = unit ? value.toFixed((value < 100) + extra) : String(n);
    if (unit < 3 && Number(text) >= 1024) unit += 1;
    else return `${text.includes(".") ? text.replace(/\.?0+$/, "") : text} ${["B", "KB", "MB", "GB"][unit]}`;
  }
}

/** A node's message with bytes in human units ("the limit is 16 KB"). Numbers
 * that differ never read the same: more decimals, or else exact bytes
 * ("content is 16.02 KB; the limit is 16 KB"). */
export function sayBytes(text) {
  if (typeof text !== "string" || !/\bbytes?\b/.test(text)) return text;
  const found = /\b(\d+) bytes?\b|\b(limit is|at most|over|up to) (\d+)\b(?! ?[A-Za-z])/g;
  const numbers = [...new Set([...text.matchAll(found)].map((m) => Number(m[1] || m[3])))];
  let say = (n) => `${n.toLocaleString("en")} bytes`;
  for (const extra of [0, 1, 2]) {
    if (new Set(numbers.map((n) => formatBytes(n, extra))).size === numbers.length) {
      say = (n) => formatBytes(n, extra);
      break;
    }
  }
  return text.replace(found, (_, n, words, m) => (words ? `${words} ${say(Number(m))}` : say(Number(n))));
}

/** A did:key shortened for display ("did:key:z6Mk…Xy12"). */
export function shortDid(did) {
  if (!did) return "";
  return did.length > 24 ? `${did.slice(0, 14)}…${did.slice(-4)}` : did;
}

/** Compare two decimal cursors (strings of up to 18 digits). */
export function cursorCompare(a, b) {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** A random id for idempotent sends (`clientId`). */
export function newClientId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Whether *content* mentions the participant named *name* (the node's rule:
 * `@name`, case-insensitive, also inside longer words). */
export function mentions(content, name) {
  return content.toLowerCase().includes("@" + name.toLowerCase());
}

let toastTimer = 0;
/** A short message for everyone (role=alert), gone after a few seconds. */
export function toast(text) {
  const el = $("toast");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    el.hidden = true;
  }, 6000);
}
