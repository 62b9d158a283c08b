// The Models view (#playground): chat with one of the node's configured
// models through its OpenAI-compatible proxy (docs/models.md), the answer
// streamed token by token (server-sent events read from fetch's body), and
// stoppable. The conversation lives in memory only: leaving the page (or
// "New chat") forgets it.

import { ApiError } from "./api.js";
import { fill, h } from "./dom.js";
import { Panel, errorLine, field, reason, statusLine } from "./view.js";

const COMPLETIONS = "/api/models/v1/chat/completions";

export class PlaygroundPanel extends Panel {
  constructor(app) {
    super(app);
    /** the conversation: [{role, content}] as sent to the model */
    this.messages = [];
    /** the model the conversation is with */
    this.model = "";
    /** the answer under way: {controller, textNode, bubble} or null */
    this.streaming = null;
    this.ui = null;
    /** a new object each time the view is shown: a late load draws nothing */
    this.shownAs = null;
  }

  async show(body) {
    const shownAs = {};
    this.shownAs = shownAs;
    const stale = () => this.shownAs !== shownAs || !this.shown;
    fill(body, h("p", { class: "hint", role: "status", text: "Loading the models…" }));
    let models;
    try {
      models = await this.app.api.get("/api/models");
    } catch (error) {
      if (stale()) return;
      fill(body, h("p", { class: "error", role: "alert", text: `The models could not be listed: ${reason(error)}` }));
      return;
    }
    if (stale()) return;
    if (!models.length) {
      fill(body, h("section", {},
        h("h2", { text: "No model yet" }),
        h("p", { text: "No model is configured on this node. An admin adds one in the console (or with MESH_MODELS at start-up)." })));
      return;
    }
    if (!models.some((m) => m.name === this.model)) {
      this.drop();
      this.model = models[0].name;
      this.messages = [];
    }

    const select = h("select", { on: { change: () => this.pick(select.value) } },
      models.map((m) => h("option", { value: m.name, text: m.name, selected: m.name === this.model })));
    const log = h("div", { class: "pg-log", role: "log", "aria-live": "polite", "aria-label": "Conversation with the model", tabindex: "0" });
    const input = h("textarea", { rows: "3", maxlength: "100000", on: { keydown: (e) => this.key(e) } });
    const send = h("button", { type: "submit", class: "primary", text: "Send" });
    const stop = h("button", { type: "button", class: "danger", text: "Stop", disabled: true, on: { click: () => this.stop() } });
    const fresh = h("button", { type: "button", text: "New chat", on: { click: () => this.newChat() } });
    const status = statusLine();
    const error = errorLine();
    const form = h("form", { class: "pg-composer", novalidate: true, "aria-label": "Message the model", on: { submit: (e) => { e.preventDefault(); this.send(); } } },
      field("Message", input, "Enter sends, Shift+Enter starts a new line. The conversation is kept only in this page."),
      h("div", { class: "row" }, send, stop, fresh),
      status, error);
    this.ui = { select, log, input, send, stop, fresh, status, error };
    fill(body,
      h("section", { class: "pg", "aria-label": "Model playground" },
        h("div", { class: "pg-head" }, field("Model", select)),
        log, form));
    this.drawLog();
    this.renderBusy();
    input.focus();
  }

  hide() {
    this.shownAs = null;
    // the stream goes on in the background: its text lands in the
    // conversation, shown again when the view is
    this.ui = null;
  }

  /** Signing out: the stream ends and the conversation is forgotten. */
  dispose() {
    this.drop();
    this.messages = [];
    this.hide();
  }

  pick(model) {
    if (model === this.model) return;
    this.drop();
    this.model = model;
    const had = this.messages.length > 0;
    this.messages = [];
    this.drawLog();
    if (had) this.say(`New chat with ${model}.`);
  }

  key(event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      this.send();
    }
  }

  newChat() {
    this.drop();
    this.messages = [];
    if (!this.ui) return;
    this.drawLog();
    this.ui.error.textContent = "";
    this.say("New chat: the conversation was cleared.");
    this.ui.input.focus();
  }

  say(text) {
    if (this.ui) this.ui.status.textContent = text;
  }

  /** One message of the log (its text as text, never markup). */
  bubble(role, content, model) {
    const text = document.createTextNode(content);
    const el = h("div", { class: `pg-msg pg-${role}`, role: "article", "aria-label": role === "user" ? "You" : model },
      h("p", { class: "pg-who", text: role === "user" ? "You" : model }),
      h("p", { class: "pg-text" }, text));
    return { el, text };
  }

  drawLog() {
    if (!this.ui) return;
    const parts = this.messages.map((m) => this.bubble(m.role, m.content, m.model || this.model).el);
    if (!parts.length) parts.push(h("p", { class: "hint pg-empty", text: `Ask ${this.model} anything.` }));
    fill(this.ui.log, parts);
    if (this.streaming) {
      this.ui.log.append(this.streaming.el);
    }
    this.ui.log.scrollTop = this.ui.log.scrollHeight;
  }

  renderBusy() {
    const ui = this.ui;
    if (!ui) return;
    const busy = Boolean(this.streaming);
    ui.send.disabled = busy;
    ui.stop.disabled = !busy;
    ui.log.setAttribute("aria-busy", busy ? "true" : "false");
  }

  async send() {
    const ui = this.ui;
    if (!ui || this.streaming) return;
    const content = ui.input.value.trim();
    if (!content) {
      ui.error.textContent = "Write a message first.";
      ui.input.focus();
      return;
    }
    ui.error.textContent = "";
    ui.input.value = "";
    const model = this.model;
    this.messages.push({ role: "user", content });
    const request = this.messages.map(({ role, content: c }) => ({ role, content: c }));
    const answer = this.bubble("assistant", "", model);
    answer.el.classList.add("pg-streaming");
    const controller = new AbortController();
    const streaming = { controller, el: answer.el, text: answer.text, content: "" };
    this.streaming = streaming;
    this.drawLog();
    this.renderBusy();
    this.say(`${model} is answering…`);

    let ended = "done";
    try {
      await this.stream(model, request, controller.signal, (piece) => {
        streaming.content += piece;
        streaming.text.appendData(piece);
        if (this.ui) this.ui.log.scrollTop = this.ui.log.scrollHeight;
      });
    } catch (error) {
      if (error.name === "AbortError") ended = "stopped";
      else {
        ended = "failed";
        if (this.ui) this.ui.error.textContent = reason(error);
      }
    }
    if (this.streaming !== streaming) return; // a new chat dropped it
    this.streaming = null;
    answer.el.classList.remove("pg-streaming");
    if (streaming.content) {
      this.messages.push({ role: "assistant", content: streaming.content, model });
    } else if (ended === "failed") {
      // nothing arrived: the question stays in the box to be sent again
      this.messages.pop();
      if (this.ui && !this.ui.input.value) this.ui.input.value = content;
    }
    this.drawLog();
    this.renderBusy();
    if (ended === "stopped") this.say(streaming.content ? "Stopped: what arrived is kept." : "Stopped before any answer.");
    else if (ended === "failed") this.say("");
    else this.say(`${model} answered.`);
    if (this.ui && ended !== "failed") this.ui.input.focus();
  }

  stop() {
    if (this.streaming) this.streaming.controller.abort();
  }

  /** End the stream and forget it: what it brought goes nowhere (a new
   * chat, another model). */
  drop() {
    const streaming = this.streaming;
    this.streaming = null;
    if (streaming) streaming.controller.abort();
    this.renderBusy();
  }

  /** POST a streamed completion; *onPiece* gets each delta's text. Throws
   * ApiError with the node's (or upstream's) message, or AbortError. */
  async stream(model, messages, signal, onPiece) {
    const response = await this.app.api.open(
      "POST",
      COMPLETIONS,
      { model, messages, stream: true },
      { signal, accept: "text/event-stream" },
    );
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (!line.startsWith("data:")) continue; // blank lines, comments, other fields
        const data = line.slice(5).trim();
        if (data === "[DONE]") {
          reader.cancel().catch(() => {});
          return;
        }
        let event;
        try {
          event = JSON.parse(data);
        } catch {
          continue;
        }
        if (event && event.error) {
          const message = typeof event.error === "object" ? event.error.message : String(event.error);
          throw new ApiError(502, (event.error && event.error.code) || "stream_error", message || "The model failed.");
        }
        const piece = event && event.choices && event.choices[0] && event.choices[0].delta && event.choices[0].delta.content;
        if (piece) onPiece(piece);
      }
    }
  }
}
