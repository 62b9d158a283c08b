// The console's "Models" section (#console/models): the language models the
// node's proxy offers (GET /api/models), adding one (POST /api/models),
// removing one (DELETE /api/models/:name), who may use each one (PATCH
// /api/models/:name: its lowest role, and whether guests may), the budgets
// per role and participant and today's use against them (GET/PUT
// /api/models/budgets...), and what each participant used
// (GET /api/models/usage). docs/models.md, decision 0053.
//
// An upstream's API key is typed into a password field, sent once in the
// POST body and cleared from the field as soon as the node answers: the
// node never returns it (a model only says `hasApiKey`), and the page keeps
// it in no variable, storage or address.

import { fill, h, longTime } from "./dom.js";
import { confirmAction } from "./dialogs.js";
import { errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { seg } from "./api.js";

/** A table of many columns (panels.js's table() frames it for scrolling). */
const wide = (el) => {
  el.classList.add("console-b-wide");
  return el;
};

const SOURCES = {
  config: "Node settings",
  api: "Added here",
};

export class ModelsSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.models = [];
    this.usage = [];
    this.budgets = null; // GET /api/models/budgets
    this.names = new Map(); // participantId -> name, for the usage table
  }

  /** Left: a key typed but not sent does not stay in the page. */
  hide() {
    if (this.addKey) this.addKey.value = "";
    this.body = null;
  }

  render(body) {
    this.body = body;
    this.listBox = h("div", {}, h("p", { class: "hint", text: "Loading models…" }));
    this.listStatus = statusLine();
    this.listError = errorLine();
    this.usageBox = h("div", {}, h("p", { class: "hint", text: "Loading usage…" }));
    this.usageError = errorLine();
    const refresh = h("button", {
      type: "button",
      class: "small",
      text: "Refresh usage",
      on: { click: (e) => guarded(e.currentTarget, this.usageError, () => this.loadUsage(true)) },
    });
    fill(
      body,
      h(
        "section",
        { "aria-labelledby": "console-models-heading" },
        h("h2", { id: "console-models-heading", text: "Models" }),
        h("p", {
          class: "hint",
          text: "Everyone on this mesh uses these models through the node's proxy with their own token; the upstream's key stays on the node.",
        }),
        this.listBox,
        this.listStatus,
        this.listError,
      ),
      this.addPart(),
      this.budgetPart(),
      h(
        "section",
        { "aria-labelledby": "console-usage-heading" },
        h(
          "div",
          { class: "console-head" },
          h("h2", { id: "console-usage-heading", text: "Usage per participant" }),
          refresh,
        ),
        this.usageBox,
        this.usageError,
      ),
    );
    this.loadBudgets().then(() => this.loadModels());
    this.loadUsage(false);
  }


  // the list ------------------------------------------------------------------

  async loadModels() {
    try {
      const models = await this.app.api.get("/api/models");
      this.models = models;
    } catch (error) {
      if (this.body) this.listError.textContent = reason(error);
      return;
    }
    if (this.body) this.renderModels();
  }

  renderModels() {
    if (!this.models.length) {
      fill(this.listBox, h("p", { class: "hint", text: "No models yet. Add one below." }));
      return;
    }
    const rows = this.models.map((model) => [
      h("bdi", { class: "console-b-name", text: model.name }),
      h("span", { class: "console-b-url", text: model.baseUrl || "" }),
      h("bdi", { text: model.upstreamModel || model.name }),
      model.hasApiKey ? "Stored" : "None",
      SOURCES[model.source] || model.source,
      model.createdAt ? longTime(model.createdAt) : "",
      this.accessCell(model),
      this.removeCell(model),
    ]);
    fill(
      this.listBox,
      wide(table(
        `${this.models.length} ${this.models.length === 1 ? "model" : "models"}`,
        ["Name", "Base URL", "Upstream model", "API key", "Source", "Added", "Who may use it", "Actions"],
        rows,
      )),
    );
  }

  /** The model's lowest role and its guests switch, editable in place. */
  accessCell(model) {
    const roles = this.budgets ? this.budgets.roles.map((r) => r.name || r.role) : [];
    if (model.minRole && !roles.includes(model.minRole)) roles.push(model.minRole);
    const select = h(
      "select",
      { "aria-label": `Lowest role that may use ${model.name}` },
      roles.map((role) => h("option", { value: role, text: role, selected: role === model.minRole })),
    );
    const guests = h("input", { type: "checkbox", checked: !!model.guests });
    const save = h("button", {
      type: "button",
      class: "small",
      text: "Save",
      "aria-label": `Save who may use ${model.name}`,
      on: {
        click: async (e) => {
          const done = await guarded(e.currentTarget, this.listError, () =>
            this.app.api.patch(`/api/models/${seg(model.name)}`, {
              minRole: select.value,
              guests: guests.checked,
            }),
          );
          if (done === undefined) return;
          this.listStatus.textContent = `${model.name}: ${done.minRole} and above${done.guests ? ", and guests" : ""} may use it.`;
        },
      },
    });
    return h(
      "div",
      { class: "row" },
      select,
      h("label", {}, guests, ` Guests may use ${model.name}`),
      save,
    );
  }

  removeCell(model) {
    if (model.source === "config") {
      return h("span", {
        class: "hint",
        text: "Set in the node's settings (MESH_MODELS): change them to remove it.",
      });
    }
    return h("button", {
      type: "button",
      class: "small danger",
      text: "Remove",
      "aria-label": `Remove ${model.name}`,
      on: { click: (e) => this.remove(model, e.currentTarget) },
    });
  }

  async remove(model, button) {
    const sure = await confirmAction(
      `Remove the model ${model.name}?`,
      "Clients and bots that ask for it get model_not_found from now on. Its usage figures stay.",
      "Remove model",
    );
    if (!sure) {
      button.focus();
      return;
    }
    const done = await guarded(button, this.listError, () => this.app.api.delete(`/api/models/${seg(model.name)}`));
    if (done === undefined) return;
    this.listStatus.textContent = `Removed ${model.name}.`;
    await this.loadModels();
    if (this.body) this.addName.focus();
  }

  // adding -----------------------------------------------------------------------

  addPart() {
    this.addName = h("input", {
      type: "text",
      name: "name",
      required: true,
      maxlength: "100",
      autocomplete: "off",
      spellcheck: "false",
    });
    this.addUrl = h("input", {
      type: "url",
      name: "baseUrl",
      required: true,
      placeholder: "https://api.example.com/v1",
      autocomplete: "off",
      spellcheck: "false",
    });
    this.addUpstream = h("input", { type: "text", name: "upstreamModel", autocomplete: "off", spellcheck: "false" });
    this.addKey = h("input", { type: "password", name: "apiKey", autocomplete: "new-password", spellcheck: "false" });
    this.addStatus = statusLine();
    this.addError = errorLine();
    const submit = h("button", { type: "submit", class: "primary", text: "Add model" });
    const form = h(
      "form",
      { class: "console-form", on: { submit: (e) => this.add(e, submit) } },
      field("Name", this.addName, "What clients put in “model”: letters, digits and . _ : - (up to 100)."),
      field("Base URL", this.addUrl, "The upstream's OpenAI-compatible base; the proxy calls {base URL}/chat/completions."),
      field("Upstream model", this.addUpstream, "The upstream's own name for the model (empty: the name above)."),
      field("API key", this.addKey, "Sent once and stored encrypted on the node; it is never shown again."),
      h("div", { class: "row" }, submit),
      this.addStatus,
      this.addError,
    );
    return h(
      "section",
      { "aria-labelledby": "console-add-model-heading" },
      h("h2", { id: "console-add-model-heading", text: "Add a model" }),
      form,
    );
  }

  async add(event, submit) {
    event.preventDefault();
    this.addStatus.textContent = "";
    const body = { name: this.addName.value.trim(), baseUrl: this.addUrl.value.trim() };
    const upstream = this.addUpstream.value.trim();
    if (upstream) body.upstreamModel = upstream;
    if (this.addKey.value) body.apiKey = this.addKey.value;
    const added = await guarded(submit, this.addError, () => this.app.api.post("/api/models", body));
    // the key leaves the page either way: typed again if the node refused
    this.addKey.value = "";
    delete body.apiKey;
    if (added === undefined) return;
    this.addName.value = "";
    this.addUrl.value = "";
    this.addUpstream.value = "";
    this.addStatus.textContent = `Added ${added.name}${added.hasApiKey ? " (its key is stored on the node)" : ""}.`;
    await this.loadModels();
  }

  // budgets ------------------------------------------------------------------------

  budgetPart() {
    this.budgetBox = h("div", {}, h("p", { class: "hint", text: "Loading budgets…" }));
    this.budgetStatus = statusLine();
    this.budgetError = errorLine();
    this.todayBox = h("div", {});
    return h(
      "section",
      { "aria-labelledby": "console-budgets-heading" },
      h("h2", { id: "console-budgets-heading", text: "Budgets" }),
      h("p", {
        class: "hint",
        text: "Requests a minute and tokens a day (UTC) per participant: its own budget, else its role's, else the node's default. Empty inherits; 0 is no limit. The owner has none.",
      }),
      this.budgetBox,
      h("h3", { id: "console-today-heading", text: "Today against budgets" }),
      this.todayBox,
      this.participantForm(),
      this.budgetStatus,
      this.budgetError,
    );
  }

  /** A budget for someone not listed yet (who has not used a model today). */
  participantForm() {
    this.whoSelect = h("select", { name: "participant" });
    this.whoRpm = h("input", { type: "number", min: "0", step: "1", name: "requestsPerMinute" });
    this.whoTpd = h("input", { type: "number", min: "0", step: "1", name: "tokensPerDay" });
    const submit = h("button", { type: "submit", text: "Set budget" });
    const read = (input) => (input.value.trim() === "" ? null : Number(input.value));
    return h(
      "form",
      {
        class: "console-form",
        "aria-labelledby": "console-who-heading",
        on: {
          submit: async (e) => {
            e.preventDefault();
            const id = this.whoSelect.value;
            if (!id) return;
            const done = await guarded(submit, this.budgetError, () =>
              this.app.api.put(`/api/models/budgets/participants/${seg(id)}`, {
                requestsPerMinute: read(this.whoRpm),
                tokensPerDay: read(this.whoTpd),
              }),
            );
            if (done === undefined) return;
            this.whoRpm.value = "";
            this.whoTpd.value = "";
            this.budgetStatus.textContent = `Saved the budget of ${this.subjectName(done)}.`;
            await this.loadBudgets();
          },
        },
      },
      h("h3", { id: "console-who-heading", text: "A participant's own budget" }),
      field("Participant", this.whoSelect),
      field("Requests a minute", this.whoRpm, "Empty: the role's. 0: no limit."),
      field("Tokens a day", this.whoTpd, "Empty: the role's. 0: no limit."),
      h("div", { class: "row" }, submit),
    );
  }

  fillParticipants() {
    const people = [...this.app.store.participants.values()]
      .filter((p) => p.role !== "owner")
      .sort((a, b) => a.name.localeCompare(b.name));
    const kept = this.whoSelect.value;
    fill(
      this.whoSelect,
      people.map((p) => h("option", { value: p.participantId, text: `${p.name} (${p.role})`, selected: p.participantId === kept })),
    );
  }

  async loadBudgets() {
    try {
      this.budgets = await this.app.api.get("/api/models/budgets");
    } catch (error) {
      if (this.body) this.budgetError.textContent = reason(error);
      return;
    }
    if (this.body) this.renderBudgets();
  }

  /** A number field for one budget figure: empty is inherited. */
  figure(value, label, inherited) {
    return h("input", {
      type: "number",
      min: "0",
      step: "1",
      value: value === null || value === undefined ? "" : String(value),
      placeholder: inherited,
      "aria-label": label,
      class: "console-b-num-input",
    });
  }

  saveButton(label, path, rpm, tpd) {
    return h("button", {
      type: "button",
      class: "small",
      text: "Save",
      "aria-label": label,
      on: {
        click: async (e) => {
          const read = (input) => (input.value.trim() === "" ? null : Number(input.value));
          const done = await guarded(e.currentTarget, this.budgetError, () =>
            this.app.api.put(path, { requestsPerMinute: read(rpm), tokensPerDay: read(tpd) }),
          );
          if (done === undefined) return;
          this.budgetStatus.textContent = `Saved the budget of ${this.subjectName(done)}.`;
          await this.loadBudgets();
        },
      },
    });
  }

  subjectName(stored) {
    if (stored.scope === "role") return stored.subject;
    return this.nameOf(stored.subject);
  }

  renderBudgets() {
    const { defaults, roles, participants } = this.budgets;
    const number = (n) => (n === 0 ? "no limit" : Number(n).toLocaleString());
    const roleRows = roles.map((role) => {
      const inherited = role.inherited || defaults;
      const rpm = this.figure(role.requestsPerMinute, `Requests a minute for ${role.role}`, number(inherited.requestsPerMinute));
      const tpd = this.figure(role.tokensPerDay, `Tokens a day for ${role.role}`, number(inherited.tokensPerDay));
      return [
        h("bdi", { text: role.role }),
        rpm,
        tpd,
        this.saveButton(`Save the budget of ${role.role}`, `/api/models/budgets/roles/${seg(role.role)}`, rpm, tpd),
      ];
    });
    fill(
      this.budgetBox,
      wide(table("Budgets per role", ["Role", "Requests a minute", "Tokens a day", "Actions"], roleRows)),
    );
    for (const p of participants) this.names.set(p.participantId, p.name);
    this.fillParticipants();
    if (!participants.length) {
      fill(this.todayBox, h("p", { class: "hint", text: "Nobody has used a model today." }));
      return;
    }
    const rows = participants.map((p) => {
      const rpm = this.figure(p.own.requestsPerMinute, `Requests a minute for ${p.name}`, number(p.budget.requestsPerMinute));
      const tpd = this.figure(p.own.tokensPerDay, `Tokens a day for ${p.name}`, number(p.budget.tokensPerDay));
      const limit = p.budget.tokensPerDay;
      const used = limit ? `${Number(p.tokens).toLocaleString()} of ${Number(limit).toLocaleString()}` : `${Number(p.tokens).toLocaleString()} (no limit)`;
      const cells = [
        h("bdi", { text: p.name }),
        h("bdi", { text: p.role }),
        h("span", { class: "console-b-num", text: Number(p.requests).toLocaleString() }),
      ];
      if (limit) {
        cells.push(
          h(
            "div",
            {},
            h("div", { class: "console-b-num", text: used }),
            h("meter", {
              min: "0",
              max: String(limit),
              value: String(Math.min(p.tokens, limit)),
              "aria-label": `Tokens ${p.name} used today`,
            }),
          ),
        );
      } else {
        cells.push(h("span", { class: "console-b-num", text: used }));
      }
      cells.push(rpm, tpd, this.saveButton(`Save the budget of ${p.name}`, `/api/models/budgets/participants/${seg(p.participantId)}`, rpm, tpd));
      return cells;
    });
    fill(
      this.todayBox,
      wide(
        table(
          "Use today against budgets",
          ["Participant", "Role", "Requests today", "Tokens today", "Own requests a minute", "Own tokens a day", "Actions"],
          rows,
        ),
      ),
    );
  }

  // usage --------------------------------------------------------------------------

  async loadUsage(fromButton) {
    if (fromButton) await this.loadBudgets();
    try {
      const usage = await this.app.api.get("/api/models/usage");
      this.usage = usage;
      await this.learnNames(usage);
    } catch (error) {
      if (fromButton) throw error;
      if (this.body) this.usageError.textContent = reason(error);
      return;
    }
    if (this.body) this.renderUsage();
  }

  /** Names of the participants in *usage* the page does not know yet. */
  async learnNames(usage) {
    const { participants } = this.app.store;
    const unknown = usage.some((u) => !participants.has(u.participantId) && !this.names.has(u.participantId));
    if (!unknown) return;
    try {
      for (const p of await this.app.api.get("/api/participants")) this.names.set(p.participantId, p.name);
    } catch {
      // shown by id
    }
  }

  nameOf(participantId) {
    const known = this.app.store.participants.get(participantId);
    if (known) return known.name;
    return this.names.get(participantId) || participantId;
  }

  renderUsage() {
    if (!this.usage.length) {
      fill(this.usageBox, h("p", { class: "hint", text: "Nobody has used a model yet." }));
      return;
    }
    const sorted = [...this.usage].sort(
      (a, b) => this.nameOf(a.participantId).localeCompare(this.nameOf(b.participantId)) || a.model.localeCompare(b.model),
    );
    const number = (n) => h("span", { class: "console-b-num", text: Number(n).toLocaleString() });
    fill(
      this.usageBox,
      wide(table(
        "Requests and tokens by participant and model",
        ["Participant", "Model", "Requests", "Errors", "Prompt tokens", "Completion tokens", "Last used"],
        sorted.map((u) => [
          h("bdi", { text: this.nameOf(u.participantId) }),
          h("bdi", { text: u.model }),
          number(u.requests),
          number(u.errors),
          number(u.promptTokens),
          number(u.completionTokens),
          u.updatedAt ? longTime(u.updatedAt) : "",
        ]),
      )),
    );
  }
}
