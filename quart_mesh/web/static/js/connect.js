// "Connect an AI agent" (the Bots view): a dialog that gives an agent an
// identity on this mesh and shows, filled in, how the agents people run join
// it: Claude Code (`claude mcp add`), VS Code and Cursor (`mcp.json`), any MCP
// client (the address and the header), and the node's A2A agent card.
//
// The identity is a bot of its own (POST /api/agents/bootstrap: a long-lived
// bot token) or the person's own account (POST /api/auth/login with their
// password: a token of its own, so signing out here does not cut the agent
// off, nor the other way round); how long the token lasts is the node's to
// say (its lifetimes are settings), and the page reads it from the token. The
// token is shown once, in this dialog, and forgotten when it closes: nothing
// is stored by the page, and an answer that comes after a close is dropped.

import { h, icon, toast } from "./dom.js";
import { copyText, errorLine, field, reason, statusLine } from "./view.js";

const SERVER_NAME = "mesh"; // the name the agent's tools know the node by

/** The node's addresses for agents (the manifest's, else this page's origin). */
export function agentAddresses(origin, endpoints = {}) {
  return {
    mcp: endpoints.mcp || `${origin}/mcp`,
    agentCard: endpoints.agentCard || `${origin}/.well-known/agent-card.json`,
  };
}

/** *text* as one POSIX shell word: single-quoted, a quote inside as '\''. */
export function shellWord(text) {
  return `'${text.replace(/'/g, "'\\''")}'`;
}

/** When *token* expires, as the node wrote it in the token (a JWT's `exp`), or null. */
export function expiry(token) {
  try {
    const claims = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return Number.isFinite(claims.exp) ? new Date(claims.exp * 1000) : null;
  } catch {
    return null;
  }
}

/** What each client is given: its command or configuration, with *token*. */
export function agentSetups(mcpUrl, token) {
  const auth = `Bearer ${token}`;
  const json = (servers) => JSON.stringify(servers, null, 2);
  return {
    claude: `claude mcp add --transport http ${SERVER_NAME} ${shellWord(mcpUrl)} --header ${shellWord(`Authorization: ${auth}`)}`,
    // VS Code: .vscode/mcp.json (a workspace) or the user's mcp.json, key "servers"
    vscode: json({ servers: { [SERVER_NAME]: { type: "http", url: mcpUrl, headers: { Authorization: auth } } } }),
    // Cursor: ~/.cursor/mcp.json (or .cursor/mcp.json in a project), key "mcpServers"
    cursor: json({ mcpServers: { [SERVER_NAME]: { url: mcpUrl, headers: { Authorization: auth } } } }),
    header: `Authorization: ${auth}`,
  };
}

export class ConnectDialog {
  /**
   * @param {object} app the page's App (api, store)
   * @param {(bot: object) => void} onBootstrapped told of a bot made here
   */
  constructor(app, onBootstrapped) {
    this.app = app;
    this.onBootstrapped = onBootstrapped;
    this.dialog = null;
    this.generation = 0; // one more at every reset: a late answer is dropped
  }

  get canBootstrap() {
    const { store } = this.app;
    return store.can("agents.bootstrap") || Boolean(store.status && store.status.registrationMode === "open");
  }

  /** People sign in with a password; guests and bots have none. */
  get hasPassword() {
    const me = this.app.store.me;
    return Boolean(me) && me.kind === "human";
  }

  /** Open the dialog (made on first use, emptied on every close); who may
   * choose what is asked again (a role or the mesh's settings may change). */
  open() {
    if (!this.dialog) this.build();
    this.offer();
    this.reset();
    this.dialog.showModal();
    const first = this.dialog.querySelector("input:checked:not([disabled])") || this.closeButton;
    first.focus();
    this.readAddresses();
  }

  /** Close it (the view is left): what it showed is forgotten. */
  close() {
    if (this.dialog && this.dialog.open) this.dialog.close();
  }

  /** Remove the dialog (the person signs out), and every reference to what it showed. */
  dispose() {
    if (!this.dialog) return;
    this.reset();
    if (this.dialog.open) this.dialog.close();
    this.dialog.remove();
    for (const key of ["dialog", "form", "result", "botName", "password", "submit", "error", "closeButton"]) this[key] = null;
    this.choices = this.botField = this.passwordField = this.addresses = null;
  }

  /** The choices this person has now, each with why (not). */
  offer() {
    const hints = {
      bot: this.canBootstrap
        ? "Recommended: it appears as a bot, with a long-lived token of its own that you can revoke by killing the bot."
        : "Only an administrator may register bots on this mesh.",
      me: this.hasPassword
        ? "It acts as you, with everything your role may do."
        : "Only people who sign in with a password can hand their account to an agent.",
    };
    const enabled = { bot: this.canBootstrap, me: this.hasPassword };
    for (const [value, { radio, hint }] of Object.entries(this.choices)) {
      radio.disabled = !enabled[value];
      hint.textContent = hints[value];
    }
  }

  async readAddresses() {
    const origin = location.origin;
    this.addresses = agentAddresses(origin);
    try {
      const manifest = await this.app.api.get("/.well-known/mesh-manifest.json");
      this.addresses = agentAddresses(origin, (manifest && manifest.endpoints) || {});
    } catch {
      // this page's own origin, then
    }
  }

  build() {
    this.closeButton = h(
      "button",
      {
        type: "button",
        class: "icon-button",
        "aria-label": "Close connect an AI agent",
        on: { click: () => this.dialog.close() },
      },
      icon("close"),
    );
    this.choices = {};
    const choice = (value, label) => {
      const hintId = `connect-${value}-hint`;
      const radio = h("input", {
        type: "radio",
        name: "connect-as",
        value,
        "aria-describedby": hintId,
        on: { change: () => this.showChoice() },
      });
      const hint = h("p", { id: hintId, class: "hint" });
      this.choices[value] = { radio, hint };
      return h("div", { class: "connect-choice" }, h("label", {}, radio, " ", label), hint);
    };
    this.botName = h("input", { type: "text", autocomplete: "off", maxlength: "64", spellcheck: "false" });
    this.botField = field("Bot name", this.botName, "How the agent is called in the rooms.");
    this.password = h("input", { type: "password", autocomplete: "current-password" });
    this.passwordField = field(
      "Your password",
      this.password,
      "The page signs you in once more, for the agent: a token of its own, which expires as a sign-in's does.",
    );
    this.error = errorLine();
    this.submit = h("button", { type: "submit", class: "primary", text: "Create the token" });
    this.form = h(
      "form",
      { class: "connect-form", novalidate: true, on: { submit: (event) => this.create(event) } },
      h(
        "fieldset",
        { class: "stack" },
        h("legend", { text: "Who the agent is" }),
        choice("bot", "A bot of its own"),
        choice("me", "Me: it uses my account"),
      ),
      this.botField,
      this.passwordField,
      h("div", { class: "row" }, this.submit),
      this.error,
    );
    this.result = h("div", { class: "connect-result" });
    this.dialog = h(
      "dialog",
      {
        id: "connect-dialog",
        class: "dialog wide connect-dialog",
        "aria-labelledby": "connect-title",
        "aria-describedby": "connect-intro",
        on: { close: () => this.reset() },
      },
      h("header", { class: "dialog-head" }, h("h2", { id: "connect-title", text: "Connect an AI agent" }), this.closeButton),
      h("p", {
        id: "connect-intro",
        text:
          "Claude Code, Cursor, VS Code and other MCP clients join this mesh as a participant, " +
          "under the rooms' rules. Choose who the agent is; the next step shows what to run.",
      }),
      this.form,
      this.result,
    );
    document.body.append(this.dialog);
  }

  /** Back to the first step, forgetting any token shown. */
  reset() {
    if (!this.dialog) return;
    this.generation += 1;
    this.result.replaceChildren();
    this.form.hidden = false;
    this.botName.value = "";
    this.password.value = "";
    this.error.textContent = "";
    const radios = [...this.form.querySelectorAll("input[type=radio]")];
    const enabled = radios.filter((r) => !r.disabled);
    for (const r of radios) r.checked = false;
    if (enabled.length) enabled[0].checked = true;
    this.showChoice();
  }

  get choice() {
    const checked = this.form.querySelector("input[name=connect-as]:checked");
    return checked ? checked.value : null;
  }

  showChoice() {
    const choice = this.choice;
    this.botField.hidden = choice !== "bot";
    this.passwordField.hidden = choice !== "me";
    this.submit.disabled = choice === null;
  }

  async create(event) {
    event.preventDefault();
    const choice = this.choice;
    if (choice === "bot" && !this.botName.value.trim()) {
      this.error.textContent = "The bot needs a name.";
      this.botName.focus();
      return;
    }
    if (choice === "me" && !this.password.value) {
      this.error.textContent = "Type your password.";
      this.password.focus();
      return;
    }
    const { submit, error, generation } = this;
    submit.disabled = true;
    error.textContent = "";
    let made;
    try {
      if (choice === "bot") {
        const bot = await this.app.api.post("/api/agents/bootstrap", {
          name: this.botName.value.trim(),
          type: "nanoclaw",
          description: "An AI agent connected over MCP",
        });
        made = { token: bot.token, name: bot.name, bot };
      } else {
        const password = this.password.value;
        this.password.value = ""; // forgotten at once, whatever happens next
        const session = await this.app.api.post("/api/auth/login", { name: this.app.store.me.name, password });
        made = { token: session.token, name: this.app.store.me.name, bot: null };
      }
    } catch (e) {
      if (generation === this.generation) error.textContent = reason(e);
    }
    const closed = generation !== this.generation || !this.dialog || !this.dialog.open;
    if (!closed) submit.disabled = false;
    if (!made) return;
    if (made.bot) this.onBootstrapped(made.bot);
    if (!closed) return this.showSetups(made);
    // closed meanwhile: the token is dropped (the dialog shows it or nothing)
    if (made.bot) toast(`The bot ${made.name} was made, but its token was not shown (the dialog was closed). Kill it if it is not wanted.`);
  }

  showSetups({ token, name, bot }) {
    const note = statusLine();
    const { mcp, agentCard } = this.addresses || agentAddresses(location.origin);
    const setups = agentSetups(mcp, token);
    const expires = expiry(token);
    const copyButton = (value, label) =>
      h("button", {
        type: "button",
        class: "small",
        text: "Copy",
        "aria-label": label,
        on: { click: () => copyText(value, note) },
      });
    const line = (label, value, copyLabel, hint = "") =>
      h(
        "div",
        { class: "bot-copy" },
        field(label, h("input", { type: "text", readonly: true, value, spellcheck: "false", class: "bot-value" }), hint),
        copyButton(value, copyLabel),
      );
    const block = (label, value, copyLabel, hint) =>
      h(
        "div",
        { class: "bot-copy" },
        field(
          label,
          h("textarea", {
            readonly: true,
            // about as many rows as the text takes, wrapped (a token is long)
            rows: String(Math.min(12, value.split("\n").reduce((n, l) => n + Math.ceil((l.length + 1) / 64), 0))),
            class: "code",
            spellcheck: "false",
            value,
          }),
          hint,
        ),
        copyButton(value, copyLabel),
      );
    const heading = h(
      "h3",
      { id: "connect-done", tabindex: "-1" },
      bot ? "A token for " : "A token for you, ",
      h("bdi", { text: name }),
    );
    this.form.hidden = true;
    this.result.replaceChildren(
      heading,
      h("p", {
        class: "notice",
        text:
          "Copy what you need now: the token is shown only here and is forgotten when this dialog closes. " +
          `Anyone holding it acts as ${bot ? "this bot" : "you"}` +
          (expires ? `, until ${expires.toLocaleDateString(undefined, { dateStyle: "long" })}.` : "."),
      }),
      line("Token", token, "Copy the token"),
      h("h3", { text: "Claude Code" }),
      block(
        "Claude Code command",
        setups.claude,
        "Copy the Claude Code command",
        "Run it in a terminal, in the project the agent works in (add --scope user for every project).",
      ),
      h("h3", { text: "VS Code" }),
      block("VS Code .vscode/mcp.json", setups.vscode, "Copy the VS Code configuration", "Or in your user mcp.json (MCP: Open User Configuration)."),
      h("h3", { text: "Cursor" }),
      block("Cursor ~/.cursor/mcp.json", setups.cursor, "Copy the Cursor configuration", "Or .cursor/mcp.json in a project."),
      h("h3", { text: "Any MCP client" }),
      line("MCP address (Streamable HTTP)", mcp, "Copy the MCP address"),
      line("Authorization header", setups.header, "Copy the Authorization header"),
      h("h3", { text: "A2A" }),
      line(
        "Agent card",
        agentCard,
        "Copy the agent card address",
        "Agents that speak A2A find this mesh's bots here (the same token authenticates).",
      ),
      note,
      h(
        "div",
        { class: "row" },
        h("button", { type: "button", text: "Start again", on: { click: () => this.again() } }),
        h("button", { type: "button", class: "primary", text: "Done", on: { click: () => this.dialog.close() } }),
      ),
    );
    heading.focus();
  }

  again() {
    this.reset();
    const first = this.form.querySelector("input:checked");
    if (first) first.focus();
  }
}
