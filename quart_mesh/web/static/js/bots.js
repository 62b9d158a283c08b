// The Bots view (#bots): every bot of the mesh (type, status, restarts,
// online, rooms), kept fresh while shown; for admins and the owner, spawning
// a managed bot (echo, llm, coder) with an API key taken from the vault
// (decrypted here, sent once in the spawn request, then forgotten) and
// killing bots; commands to the bots one may command, with their results;
// bootstrapping an external bot (its token, addresses and a mesh-bridge
// command line, shown once and never kept); connecting an AI agent over MCP
// (js/connect.js).

import { ApiError, seg } from "./api.js";
import { ConnectDialog } from "./connect.js";
import { fill, h } from "./dom.js";
import { Panel, copyText, errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { available, decrypt, versionOf } from "./vaultcrypto.js";

const REFRESH_MS = 10000; // the list is read again this often while shown
const MAX_ROOM_READS = 40; // rooms read for their members, at most
const COMMANDS = ["status", "join_room", "leave_room", "restart"];
const MANAGED = ["echo", "llm", "coder"];
const EXTERNAL = [
  ["nanoclaw", "nanoclaw: a WebSocket agent (mesh-bridge, your own client)"],
  ["simple", "simple: commands only, no chat traffic"],
  ["webhook", "webhook: the node POSTs events to your URL"],
];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Single-quote *text* for a POSIX shell. */
const shellQuote = (text) => (/^[A-Za-z0-9_./:@-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`);

/** The command line that runs mesh-bridge for a bot: the token goes through
 * $MESH_TOKEN (read without echo, so it is neither in argv nor in the shell's
 * history), as docs/bridge.md recommends. */
export function bridgeCommand(wsUrl, name) {
  const state = `${name.replace(/[^A-Za-z0-9_-]+/g, "-") || "bot"}.state`;
  return [
    "read -rs MESH_TOKEN && export MESH_TOKEN   # paste the token, then Enter",
    `mesh-bridge --mesh ${shellQuote(wsUrl)} --exec ./reply.sh --state ${shellQuote(state)}`,
  ].join("\n");
}

export class BotsPanel extends Panel {
  constructor(app) {
    super(app);
    this.agents = [];
    this.roomsOf = new Map(); // agentId -> [room name]
    this.mine = new Set(); // bots bootstrapped from this page (their registrant may command them)
    this.commands = []; // {agentId, name, record} sent from this page, newest first
    this.timer = null;
    this.refreshing = null;
    this.refreshSoon = null;
    this.generation = 0; // a new one on every show: loops of an older one stop
    this.connect = new ConnectDialog(app, (bot) => {
      this.mine.add(bot.agentId);
      this.refresh();
    });
  }

  get admin() {
    return this.app.store.can("agents.spawn");
  }

  canCommand(agent) {
    return this.app.store.can("agents.command") || this.mine.has(agent.agentId);
  }

  show(body) {
    this.generation += 1;
    this.listStatus = statusLine();
    this.listError = errorLine();
    this.listArea = h("div", { class: "bots-list" });
    this.pane = h("section", { class: "bots-pane", "aria-labelledby": "bots-pane-title", hidden: true });
    this.commandArea = h("div");
    this.commandForm = null; // drawn again into this body
    this.resultsList = null;
    body.append(
      h(
        "section",
        { "aria-labelledby": "bots-connect-title", class: "bots-connect" },
        h("h2", { id: "bots-connect-title", text: "AI agents" }),
        h("p", {
          class: "hint",
          text:
            "Claude Code, Cursor, VS Code or any MCP client can take part in this mesh's rooms: " +
            "give the agent a token and run one command.",
        }),
        h("button", {
          type: "button",
          class: "primary",
          text: "Connect an AI agent",
          "aria-haspopup": "dialog",
          on: { click: () => this.connect.open() },
        }),
      ),
      h(
        "section",
        { "aria-labelledby": "bots-list-title" },
        h("h2", { id: "bots-list-title", text: "Bots" }),
        this.listStatus,
        this.listError,
        this.listArea,
      ),
      this.pane,
      this.commandArea,
    );
    if (this.admin) body.append(this.spawnForm());
    const open = this.app.store.status && this.app.store.status.registrationMode === "open";
    if (this.app.store.can("agents.bootstrap") || open) body.append(this.bootstrapForm());
    this.refresh(true);
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    for (const command of this.commands) {
      if (!this.finished(command.record)) this.watch(command);
    }
  }

  hide() {
    clearInterval(this.timer);
    clearTimeout(this.refreshSoon);
    this.timer = null;
    this.generation += 1; // stops the command polls and the quick refreshes
    // the token of a bootstrapped bot and a typed passphrase are forgotten
    if (this.body) {
      for (const input of this.body.querySelectorAll("input[type=password]")) input.value = "";
    }
    if (this.bootstrapResult) this.bootstrapResult.replaceChildren();
    this.connect.close();
  }

  dispose() {
    this.hide();
    this.connect.dispose();
  }

  onEvent(event) {
    if (!this.shown) return;
    const known = (id) => this.agents.some((a) => a.agentId === id);
    if (event.type === "presence" && known(event.participantId)) {
      for (const agent of this.agents) {
        if (agent.agentId === event.participantId) agent.online = event.online;
      }
      this.renderList();
      this.scheduleRefresh();
    } else if (
      (event.type === "participant_joined" || event.type === "participant_left") &&
      event.participant &&
      event.participant.type !== "human" &&
      event.participant.type !== "guest"
    ) {
      this.scheduleRefresh();
    }
  }

  onSnapshot() {
    if (this.shown) this.scheduleRefresh();
  }

  /** Read the list again shortly (events come in bursts). */
  scheduleRefresh(delay = 300) {
    clearTimeout(this.refreshSoon);
    this.refreshSoon = setTimeout(() => this.refresh(), delay);
  }

  /** Read the bots and which rooms they are in. */
  async refresh(first = false) {
    if (this.refreshing) return this.refreshing;
    if (first) this.listStatus.textContent = "Loading…";
    this.refreshing = (async () => {
      try {
        const [agents, roomsOf] = await Promise.all([this.app.api.get("/api/agents"), this.readRooms()]);
        this.agents = agents;
        this.roomsOf = roomsOf;
        if (this.listError) this.listError.textContent = "";
      } catch (error) {
        if (this.listError) this.listError.textContent = reason(error);
      } finally {
        this.refreshing = null;
      }
      if (!this.shown) return;
      if (first) this.listStatus.textContent = "";
      this.renderList();
      this.renderCommandForm();
      // bots on their way up are watched more closely
      if (this.agents.some((a) => a.status === "starting" || a.status === "restarting")) this.scheduleRefresh(1000);
    })();
    return this.refreshing;
  }

  async readRooms() {
    const roomsOf = new Map();
    const rooms = await this.app.api.rooms(MAX_ROOM_READS);
    const details = await Promise.all(
      rooms.map((room) => this.app.api.get(`/api/rooms/${seg(room.roomId)}`).catch(() => null)),
    );
    for (const room of details) {
      if (!room) continue;
      for (const member of room.members || []) {
        if (!roomsOf.has(member.participantId)) roomsOf.set(member.participantId, []);
        roomsOf.get(member.participantId).push(room.name);
      }
    }
    return roomsOf;
  }

  renderList() {
    const focused = document.activeElement && this.listArea.contains(document.activeElement)
      ? document.activeElement.dataset.key
      : null;
    if (!this.agents.length) {
      fill(this.listArea, h("p", { class: "hint", text: "No bots yet." }));
      return;
    }
    const rows = this.agents.map((agent) => {
      const rooms = this.roomsOf.get(agent.agentId) || [];
      let status = "—";
      if (agent.managed) {
        status = h(
          "span",
          {},
          h("span", { class: `bot-status bot-status-${agent.status}`, text: agent.status }),
          agent.detail ? h("span", { class: "hint bot-detail", text: ` ${agent.detail}` }) : null,
        );
      } else if (agent.webhook) {
        status = `webhook ${agent.webhook.status}`;
      }
      const actions = h("div", { class: "row" });
      if (this.canCommand(agent)) {
        actions.append(
          h("button", {
            type: "button",
            class: "small",
            text: "Command",
            "aria-label": `Send a command to ${agent.name}`,
            dataset: { key: `command:${agent.agentId}` },
            on: { click: () => this.chooseForCommand(agent) },
          }),
        );
      }
      if (this.app.store.can("agents.delete")) {
        actions.append(
          h("button", {
            type: "button",
            class: "small danger",
            text: "Kill",
            "aria-label": `Kill ${agent.name}`,
            dataset: { key: `kill:${agent.agentId}` },
            on: { click: () => this.confirmKill(agent) },
          }),
        );
      }
      return [
        h("bdi", { text: agent.name }),
        agent.type,
        status,
        agent.managed ? String(agent.restarts ?? 0) : "—",
        h("span", { class: agent.online ? "bot-online" : "bot-offline", text: agent.online ? "online" : "offline" }),
        rooms.length ? h("bdi", { text: rooms.join(", ") }) : "—",
        actions.childElementCount ? actions : "—",
      ];
    });
    const count = this.agents.length;
    const wrap = table(
      `${count} ${count === 1 ? "bot" : "bots"}`,
      ["Name", "Type", "Status", "Restarts", "Online", "Rooms", "Actions"],
      rows,
    );
    // on a narrow screen the table scrolls sideways: reachable by keyboard
    wrap.tabIndex = 0;
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", "List of bots");
    fill(this.listArea, wrap);
    if (focused) {
      const again = this.listArea.querySelector(`[data-key="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  // killing -------------------------------------------------------------------

  closePane() {
    this.pane.replaceChildren();
    this.pane.hidden = true;
  }

  confirmKill(agent) {
    const heading = h("h2", { id: "bots-pane-title", tabindex: "-1" }, "Kill ", h("bdi", { text: agent.name }));
    const error = errorLine();
    const kill = h("button", {
      type: "button",
      class: "danger",
      text: "Kill for good",
      on: {
        click: async () => {
          const done = await guarded(kill, error, () => this.app.api.delete(`/api/agents/${seg(agent.agentId)}`));
          if (done === undefined) return;
          this.closePane();
          this.listStatus.textContent = `Killed ${agent.name}.`;
          await this.refresh();
          const heading = document.getElementById("bots-list-title");
          if (heading) heading.focus();
        },
      },
    });
    const keep = h("button", { type: "button", text: "Keep it", on: { click: () => this.closePane() } });
    fill(
      this.pane,
      heading,
      h("p", {
        text:
          "Its process is stopped (if the node runs it), its token stops working " +
          "and it leaves every room. Its messages stay.",
      }),
      h("div", { class: "row" }, kill, keep),
      error,
    );
    this.pane.hidden = false;
    heading.focus();
  }

  // commands ------------------------------------------------------------------

  renderCommandForm() {
    const targets = this.agents.filter((agent) => this.canCommand(agent));
    if (!targets.length) {
      this.commandArea.replaceChildren();
      this.commandForm = null;
      return;
    }
    if (this.commandForm) {
      // keep what is typed; only the list of bots changes
      const chosen = this.commandBot.value;
      fill(this.commandBot, targets.map((a) => h("option", { value: a.agentId, text: a.name })));
      if (targets.some((a) => a.agentId === chosen)) this.commandBot.value = chosen;
      return;
    }
    this.commandBot = h("select", {}, targets.map((a) => h("option", { value: a.agentId, text: a.name })));
    const command = h("input", {
      type: "text",
      value: "status",
      required: true,
      list: "bot-commands",
      autocomplete: "off",
      spellcheck: "false",
    });
    const args = h("textarea", { rows: "2", class: "code", spellcheck: "false" });
    const error = errorLine();
    const send = h("button", { type: "submit", class: "primary", text: "Send command" });
    this.resultsList = h("ol", { class: "bot-results", "aria-live": "polite" });
    this.commandForm = h(
      "form",
      {
        on: {
          submit: async (event) => {
            event.preventDefault();
            let parsed = {};
            if (args.value.trim()) {
              try {
                parsed = JSON.parse(args.value);
              } catch {
                error.textContent = "The arguments are not JSON: write an object, such as {\"roomId\": \"…\"}.";
                return;
              }
            }
            const agent = this.agents.find((a) => a.agentId === this.commandBot.value);
            if (!agent) return;
            const record = await guarded(send, error, () =>
              this.app.api.post(`/api/agents/${seg(agent.agentId)}/command`, {
                command: command.value.trim(),
                args: parsed,
              }),
            );
            if (record === undefined) return;
            const entry = { agentId: agent.agentId, name: agent.name, record, item: null };
            this.commands.unshift(entry);
            this.commands.length = Math.min(this.commands.length, 20);
            this.renderResults();
            this.watch(entry);
          },
        },
      },
      field("Bot", this.commandBot),
      field("Command", command, `The node's bots understand ${COMMANDS.join(", ")}.`),
      h("datalist", { id: "bot-commands" }, COMMANDS.map((c) => h("option", { value: c }))),
      field("Arguments (JSON, optional)", args, 'For join_room and leave_room: {"roomId": "…"}.'),
      h("div", { class: "row" }, send),
      error,
    );
    fill(
      this.commandArea,
      h(
        "section",
        { "aria-labelledby": "bots-command-title" },
        h("h2", { id: "bots-command-title", tabindex: "-1", text: "Send a command" }),
        this.commandForm,
        h("h3", { text: "Results" }),
        this.resultsList,
      ),
    );
    this.renderResults();
  }

  chooseForCommand(agent) {
    if (!this.commandForm) return;
    this.commandBot.value = agent.agentId;
    this.commandBot.focus();
  }

  finished(record) {
    return record.status === "completed" || record.status === "failed";
  }

  renderResults() {
    if (!this.resultsList) return;
    if (!this.commands.length) {
      fill(this.resultsList, h("li", { class: "hint", text: "Commands you send are listed here with their answers." }));
      return;
    }
    fill(
      this.resultsList,
      this.commands.map((entry) => {
        const { record } = entry;
        const done = this.finished(record);
        let what = "waiting for the bot…";
        if (done) what = record.ok ? "completed" : "failed";
        else if (record.status === "delivered") what = "delivered, waiting for the answer…";
        return h(
          "li",
          { class: `bot-result bot-result-${record.status}` },
          h("span", {}, h("bdi", { text: entry.name }), `: ${record.command} — ${what}`),
          done ? h("pre", { class: "copyable", text: JSON.stringify(record.result, null, 2) }) : null,
        );
      }),
    );
  }

  /** Poll a command's record until it is answered, with a growing delay,
   * while the view is shown. */
  async watch(entry) {
    const generation = this.generation;
    let delay = 300;
    while (generation === this.generation && !this.finished(entry.record)) {
      await sleep(delay);
      if (generation !== this.generation) return;
      delay = Math.min(delay * 1.6, 5000);
      try {
        entry.record = await this.app.api.get(
          `/api/agents/${seg(entry.agentId)}/commands/${seg(entry.record.commandId)}`,
        );
      } catch (error) {
        if (error instanceof ApiError && !error.transient) {
          entry.record = { ...entry.record, status: "failed", ok: false, result: { error: reason(error) } };
        }
      }
      this.renderResults();
    }
  }

  // spawning ------------------------------------------------------------------

  spawnForm() {
    const name = h("input", { type: "text", required: true, autocomplete: "off", maxlength: "64" });
    const type = h("select", {}, MANAGED.map((t) => h("option", { value: t, text: t })));
    const model = h("select", {}, h("option", { value: "", text: "(none)" }));
    const modelField = field("Model", model, "For llm and coder: one of the node's models.");
    const roomsBox = h("fieldset", { class: "bot-rooms" }, h("legend", { text: "Rooms" }));
    const keyEntry = h("select", {}, h("option", { value: "", text: "No key" }));
    const passphrase = h("input", { type: "password", autocomplete: "current-password", spellcheck: "false" });
    const passField = field(
      "Vault passphrase",
      passphrase,
      "Opens the entry in this page; the key is sent once, in this request, and forgotten.",
    );
    passField.hidden = true;
    const error = errorLine();
    const status = statusLine();
    const submit = h("button", { type: "submit", class: "primary", text: "Spawn" });
    let entries = [];

    const showFields = () => {
      modelField.hidden = type.value === "echo";
      passField.hidden = !keyEntry.value;
    };
    type.addEventListener("change", showFields);
    keyEntry.addEventListener("change", showFields);
    showFields();

    // what the form offers: the node's models, its rooms, the vault's entries
    (async () => {
      const [models, rooms, vault] = await Promise.all([
        this.app.api.get("/api/models").catch(() => []),
        this.app.api.rooms().catch(() => []),
        this.app.store.can("vault.use") ? this.app.api.get("/api/vault/entries").catch(() => []) : [],
      ]);
      entries = vault.filter((e) => versionOf(e.blob) === "v2");
      for (const m of models) model.append(h("option", { value: m.name, text: m.name }));
      for (const room of rooms) {
        const box = h("input", { type: "checkbox", value: room.roomId });
        roomsBox.append(h("label", { class: "bot-room" }, box, " ", h("bdi", { text: room.name })));
      }
      if (!rooms.length) roomsBox.append(h("p", { class: "hint", text: "No rooms." }));
      for (const entry of entries) {
        const text = entry.provider ? `${entry.label} (${entry.provider})` : entry.label;
        keyEntry.append(h("option", { value: entry.entryId, text: `From the vault: ${text}` }));
      }
      if (models.length && model.value === "") model.value = models[0].name;
    })();

    const form = h(
      "form",
      {
        class: "bots-spawn",
        on: {
          submit: async (event) => {
            event.preventDefault();
            const phrase = passphrase.value;
            passphrase.value = ""; // forgotten at once, whatever happens next
            const entry = entries.find((e) => e.entryId === keyEntry.value);
            const body = { name: name.value.trim(), type: type.value };
            if (type.value !== "echo" && model.value) body.model = model.value;
            body.rooms = [...roomsBox.querySelectorAll("input:checked")].map((box) => box.value);
            const spawned = await guarded(submit, error, async () => {
              if (entry) {
                if (!available()) throw new Error("This page has no WebCrypto: the vault cannot be opened here.");
                status.textContent = "Opening the vault entry…";
                // the plain key lives only in this request's body
                body.apiKey = await decrypt(entry.blob, phrase, entry.label);
              }
              status.textContent = "Spawning…";
              try {
                return await this.app.api.post("/api/agents/spawn", body);
              } finally {
                delete body.apiKey;
              }
            });
            if (spawned === undefined) {
              status.textContent = "";
              return;
            }
            status.textContent = `Spawned ${spawned.name}: ${spawned.status}.`;
            name.value = "";
            keyEntry.value = "";
            showFields();
            await this.refresh();
          },
        },
      },
      field("Name", name),
      field("Type", type, "echo repeats messages; llm answers with a model when addressed; coder writes code."),
      modelField,
      roomsBox,
      field("API key", keyEntry, "Taken from your vault (entries in format v2)."),
      passField,
      h("div", { class: "row" }, submit),
      status,
      error,
    );
    return h(
      "section",
      { "aria-labelledby": "bots-spawn-title" },
      h("h2", { id: "bots-spawn-title", text: "Spawn a managed bot" }),
      h("p", { class: "hint", text: "The node runs it as its own process; it connects back like any client." }),
      form,
    );
  }

  // bootstrapping -------------------------------------------------------------

  bootstrapForm() {
    const name = h("input", { type: "text", required: true, autocomplete: "off", maxlength: "64" });
    const type = h("select", {}, EXTERNAL.map(([value, text]) => h("option", { value, text })));
    const description = h("input", { type: "text", autocomplete: "off" });
    const webhookUrl = h("input", { type: "url", autocomplete: "off", placeholder: "https://…" });
    const webhookField = field("Webhook URL", webhookUrl);
    const error = errorLine();
    const submit = h("button", { type: "submit", class: "primary", text: "Bootstrap" });
    this.bootstrapResult = h("div", { class: "bots-bootstrapped" });
    const showFields = () => {
      webhookField.hidden = type.value !== "webhook";
      webhookUrl.required = type.value === "webhook";
    };
    type.addEventListener("change", showFields);
    showFields();
    const form = h(
      "form",
      {
        on: {
          submit: async (event) => {
            event.preventDefault();
            const body = { name: name.value.trim(), type: type.value };
            if (description.value.trim()) body.description = description.value.trim();
            if (type.value === "webhook") body.webhookUrl = webhookUrl.value.trim();
            const bot = await guarded(submit, error, () => this.app.api.post("/api/agents/bootstrap", body));
            if (bot === undefined) return;
            this.mine.add(bot.agentId);
            name.value = "";
            description.value = "";
            webhookUrl.value = "";
            this.showBootstrapped(bot);
            await this.refresh();
          },
        },
      },
      field("Name", name),
      field("Type", type),
      field("Description (optional)", description),
      webhookField,
      h("div", { class: "row" }, submit),
      error,
    );
    return h(
      "section",
      { "aria-labelledby": "bots-bootstrap-title" },
      h("h2", { id: "bots-bootstrap-title", text: "Bootstrap an external bot" }),
      h("p", {
        class: "hint",
        text: "For a bot you run yourself: you get its token (valid for a year) and the addresses it connects to.",
      }),
      form,
      this.bootstrapResult,
    );
  }

  showBootstrapped(bot) {
    const note = statusLine();
    const line = (label, value, copyName) => {
      const input = h("input", { type: "text", readonly: true, value, spellcheck: "false", class: "bot-value" });
      const copy = h("button", {
        type: "button",
        class: "small",
        text: "Copy",
        "aria-label": copyName,
        on: { click: () => copyText(value, note) },
      });
      return h("div", { class: "bot-copy" }, field(label, input), copy);
    };
    const command = bridgeCommand(bot.wsUrl, bot.name);
    const commandBox = h("textarea", { readonly: true, rows: "3", class: "code", spellcheck: "false", value: command });
    const heading = h("h3", { tabindex: "-1" }, "Bootstrapped ", h("bdi", { text: bot.name }));
    fill(
      this.bootstrapResult,
      heading,
      h("p", {
        class: "notice",
        text:
          "Copy the token now: it is shown only here, and this page does not keep it. " +
          "Anyone holding it acts as this bot.",
      }),
      line("Token", bot.token, "Copy the token"),
      line("WebSocket address", bot.wsUrl, "Copy the WebSocket address"),
      line("Model address", bot.modelUrl, "Copy the model address"),
      bot.webhookSecret ? line("Webhook secret", bot.webhookSecret, "Copy the webhook secret") : null,
      h(
        "div",
        { class: "bot-copy" },
        field(
          "mesh-bridge command line",
          commandBox,
          "Run it where the bot lives; ./reply.sh answers each message (docs/bridge.md).",
        ),
        h("button", {
          type: "button",
          class: "small",
          text: "Copy",
          "aria-label": "Copy the command line",
          on: { click: () => copyText(command, note) },
        }),
      ),
      note,
    );
    heading.focus();
  }
}
