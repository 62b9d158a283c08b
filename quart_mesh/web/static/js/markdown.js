// Message content → DOM, with a small, safe Markdown subset:
//
//   **bold**  *italic* or _italic_  ~~struck~~  `inline code`  ```code blocks```
//   lines: "# " to "### " headings, "- " / "1. " lists, "> " quotes
//   [text](https://…) and bare http(s):// and mailto: links
//   @name mentions (highlighted when they name a participant)
//
// Everything else, HTML included, is shown as the text it is: the result is
// built from text nodes and a fixed set of elements, never parsed as HTML.
// Links keep only http:, https: and mailto: addresses and open in a new tab
// with rel="noopener noreferrer". The scanner is linear in the content's
// length (each delimiter is searched for at most once past a position).

import { h } from "./dom.js";

const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);
// characters that force text direction (U+202D, U+202E): the "Trojan Source"
// trick that shows "exe.txt" for "txt.exe". Shown as visible marks instead.
const OVERRIDES = /[\u202d\u202e]/;
const OVERRIDE_NAMES = { "\u202d": "LRO", "\u202e": "RLO" };
const MAX_DEPTH = 3;
const WORD = /[\p{L}\p{N}_]/u;
const NAME_CHAR = /[\p{L}\p{N}_.\-]/u;

/** A safe absolute URL for *text*, or null. */
export function safeUrl(text) {
  let url;
  try {
    url = new URL(text.trim());
  } catch {
    return null;
  }
  if (!SAFE_SCHEMES.has(url.protocol)) return null;
  if (url.protocol !== "mailto:" && !url.hostname) return null;
  return url.href;
}

export function link(href, text) {
  return h("a", {
    href,
    target: "_blank",
    rel: "noopener noreferrer nofollow",
    title: href,
    text,
  });
}

/**
 * Render *content* into a fragment.
 * @param {string} content
 * @param {{ isName: (name: string) => boolean, me: string }} ctx names that
 *   are participants (for mentions) and the reader's own name
 */
export function render(content, ctx) {
  const fragment = document.createDocumentFragment();
  let i = 0;
  while (i < content.length) {
    const open = content.indexOf("```", i);
    if (open === -1) break;
    const close = content.indexOf("```", open + 3);
    if (close === -1) break;
    if (open > i) fragment.append(blocks(content.slice(i, open), ctx));
    let code = content.slice(open + 3, close);
    // an optional language name on the opening line is not shown
    const newline = code.indexOf("\n");
    if (newline !== -1 && /^[\w+#.-]{0,30}$/.test(code.slice(0, newline))) {
      code = code.slice(newline + 1);
    }
    fragment.append(h("pre", { class: "code-block" }, h("code", {}, textWithMarks(code))));
    i = close + 3;
  }
  if (i < content.length) fragment.append(blocks(content.slice(i), ctx));
  return fragment;
}

// a line's block: "# " to "### ", "- " (or * +), "1. " (or 1)), "> "
const BLOCK = /^ {0,3}(?:(#{1,3}) |([-*+]) |(\d{1,9})[.)] |(> ?))/;

function kindOf(line) {
  const m = BLOCK.exec(line) || [""];
  const kind = m[1] ? `h${m[1].length + 2}` : m[2] ? "ul" : m[3] ? "ol" : m[4] ? "blockquote" : "p";
  return [kind, line.slice(m[0].length), m[3]];
}

/** Lines as headings, lists, quotes (one level) and text, newlines kept. */
function blocks(text, ctx, quoted) {
  const out = document.createDocumentFragment();
  const lines = text.split("\n");
  // (in a quote, a quote is text)
  const kinds = lines.map((line) => (quoted && line.startsWith(">") ? ["p", line] : kindOf(line)));
  for (let i = 0; i < lines.length; ) {
    const [kind, , number] = kinds[i];
    let end = i + 1;
    while (end < lines.length && kinds[end][0] === kind && kind[0] !== "h") end += 1;
    const items = kinds.slice(i, end).map((k) => k[1]);
    i = end;
    if (kind === "p") {
      // (a last line break shows no empty line: one more keeps a blank line before a block)
      out.append(inline(items.join("\n") + (i < lines.length ? "\n" : ""), ctx, 0));
    } else if (kind === "blockquote") {
      out.append(h(kind, {}, blocks(items.join("\n"), ctx, true)));
    } else if (kind[0] === "h") {
      out.append(h(kind, {}, inline(items[0], ctx, 0)));
    } else {
      out.append(h(kind, { start: number > 1 && String(+number) }, items.map((item) => h("li", {}, inline(item, ctx, 0)))));
    }
  }
  return out;
}

/** Text, with direction overrides replaced by visible marks. */
function textWithMarks(text) {
  if (!OVERRIDES.test(text)) return document.createTextNode(text);
  const out = document.createDocumentFragment();
  for (const part of text.split(/([\u202d\u202e])/)) {
    if (OVERRIDE_NAMES[part]) {
      const code = part.codePointAt(0).toString(16).toUpperCase();
      out.append(
        h("span", {
          class: "bidi-mark",
          title: `a hidden character that reverses the direction of text (U+${code})`,
          text: `[${OVERRIDE_NAMES[part]}]`,
        }),
      );
    } else if (part) {
      out.append(document.createTextNode(part));
    }
  }
  return out;
}

/** Searches for delimiters, remembering results so the scan stays linear. */
class Finder {
  constructor(text) {
    this.text = text;
    this.memo = new Map();
    this.addressEnd = { from: -1, at: -1 };
  }

  /** The first index >= from of *needle*, or -1. */
  find(needle, from) {
    const seen = this.memo.get(needle);
    if (seen && seen.from <= from && (seen.at === -1 || seen.at >= from)) return seen.at;
    const at = this.text.indexOf(needle, from);
    this.memo.set(needle, { from, at });
    return at;
  }

  /** The end of the line *from* is on. */
  lineEnd(from) {
    const at = this.find("\n", from);
    return at === -1 ? this.text.length : at;
  }

  /** Where an address starting at *from* ends: the next space, <, > or ". */
  addressFrom(from) {
    const seen = this.addressEnd;
    if (seen.from <= from && from < seen.at) return seen.at;
    const pattern = /[\s<>"]/g;
    pattern.lastIndex = from;
    const found = pattern.exec(this.text);
    const at = found ? found.index : this.text.length;
    this.addressEnd = { from, at };
    return at;
  }
}

function inline(text, ctx, depth) {
  const out = document.createDocumentFragment();
  const finder = new Finder(text);
  let plain = "";
  const flush = () => {
    if (plain) out.append(textWithMarks(plain));
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    const prev = i > 0 ? text[i - 1] : "";
    let taken = null;
    if (ch === "`") {
      const close = finder.find("`", i + 1);
      if (close > i + 1 && close <= finder.lineEnd(i)) {
        taken = [h("code", {}, textWithMarks(text.slice(i + 1, close))), close + 1];
      }
    } else if (ch === "*" && text[i + 1] === "*" && depth < MAX_DEPTH) {
      const close = finder.find("**", i + 2);
      const inner = close === -1 ? "" : text.slice(i + 2, close);
      if (close > i + 2 && close <= finder.lineEnd(i) && inner.trim() === inner) {
        taken = [h("strong", {}, inline(inner, ctx, depth + 1)), close + 2];
      }
    } else if ((ch === "*" || ch === "_") && !WORD.test(prev) && depth < MAX_DEPTH) {
      const close = finder.find(ch, i + 1);
      const inner = close === -1 ? "" : text.slice(i + 1, close);
      const after = close === -1 ? "" : text[close + 1] || "";
      if (
        close > i + 1 &&
        close <= finder.lineEnd(i) &&
        inner.trim() === inner &&
        !WORD.test(after) &&
        !(ch === "*" && after === "*")
      ) {
        taken = [h("em", {}, inline(inner, ctx, depth + 1)), close + 1];
      }
    } else if (ch === "~" && text[i + 1] === "~" && depth < MAX_DEPTH) {
      const close = finder.find("~~", i + 2);
      const inner = close === -1 ? "" : text.slice(i + 2, close);
      if (close > i + 2 && close <= finder.lineEnd(i) && inner.trim() === inner) {
        taken = [h("del", {}, inline(inner, ctx, depth + 1)), close + 2];
      }
    } else if (ch === "[") {
      const mid = finder.find("](", i + 1);
      if (mid !== -1 && mid - i <= 500 && mid <= finder.lineEnd(i)) {
        const close = finder.find(")", mid + 2);
        if (close !== -1 && close - mid <= 2000) {
          const label = text.slice(i + 1, mid);
          const href = safeUrl(text.slice(mid + 2, close));
          if (href && label.trim() && !label.includes("[")) {
            taken = [link(href, label), close + 1];
          }
        }
      }
    } else if ((ch === "h" || ch === "m") && !WORD.test(prev)) {
      const rest = text.slice(i, i + 8).toLowerCase();
      if (rest.startsWith("https://") || rest.startsWith("http://") || rest.startsWith("mailto:")) {
        let candidate = text.slice(i, Math.min(finder.addressFrom(i), i + 2000));
        // trailing punctuation belongs to the sentence, not the address
        while (/[.,;:!?'*_]$/.test(candidate) || (candidate.endsWith(")") && !candidate.includes("("))) {
          candidate = candidate.slice(0, -1);
        }
        const href = safeUrl(candidate);
        if (href && candidate.length > 8) taken = [link(href, candidate), i + candidate.length];
      }
    } else if (ch === "@" && !NAME_CHAR.test(prev)) {
      let end = i + 1;
      while (end < text.length && NAME_CHAR.test(text[end])) end += 1;
      let name = text.slice(i + 1, end);
      while (name && /[.\-]$/.test(name)) name = name.slice(0, -1);
      if (name && ctx.isName(name)) {
        const mine = name.toLowerCase() === ctx.me.toLowerCase();
        taken = [h("span", { class: mine ? "mention me" : "mention", text: "@" + name }), i + 1 + name.length];
      }
    }
    if (taken) {
      flush();
      out.append(taken[0]);
      i = taken[1];
    } else {
      plain += ch;
      i += 1;
    }
  }
  flush();
  return out;
}
