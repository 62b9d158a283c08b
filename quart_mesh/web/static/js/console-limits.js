// The console's "Limits and uploads" section (#console/limits): the rate
// limit rules and the role multipliers (GET/PUT /api/admin/mesh/settings,
// docs/rate-limits.md), the read-only switches, the refusals counted since
// start (GET /api/admin/stats), and what the node tells about uploads.
//
// The node's API exposes no upload figures (size limit, quota, usage): they
// are start-up settings. The section says so and shows what the roles tell:
// who may upload and who is not counted against the quota.

import { fill, h } from "./dom.js";
import { errorLine, field, guarded, reason, statusLine, table } from "./view.js";

const RULES = {
  messages: "Sending and editing messages",
  reactions: "Adding and removing reactions",
  typing: "Typing signals (extra ones are dropped)",
  models: "Model proxy requests",
  search: "Searches",
  linkPreviews: "Link previews fetched for one participant",
  profile: "Changes of one's own settings",
  loginName: "Sign-in attempts for one name from one address",
  loginSlowdown: "Failed sign-ins for one name before its sign-ins slow down",
  loginAddress: "Sign-in attempts from one address",
  registrationAddress: "New accounts and guests from one address",
  challengeAddress: "Identity challenges from one address",
  federationRelay: "Events relayed by one peer node",
  federationStrangerAddress: "Signed requests from one address by nodes that are not peers",
  registryDid: "Heartbeats from one node (as a registry)",
  registryAddress: "Meshes checked for one address (as a registry)",
};

const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 3 });

/** "20 per 10 s, bursts of 150", "Off". */
export function describeRate(rule) {
  if (rule.off) return "Off";
  const per = rule.per === 1 ? "second" : rule.per === 60 ? "minute" : rule.per === 3600 ? "hour" : `${number.format(rule.per)} s`;
  const base = `${number.format(rule.count)} per ${per}`;
  return rule.burst !== rule.count ? `${base}, bursts of ${number.format(rule.burst)}` : base;
}

export class LimitsSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.settings = null;
    this.stats = null;
    this.roles = [];
    this.editing = null; // the rule name being edited
    this.onFocus = () => this.focused();
  }

  render(body) {
    this.body = body;
    this.editing = null;
    this.rulesBox = h("div", {});
    this.editBox = h("div", { class: "console-rule-edit", hidden: true });
    this.rulesStatus = statusLine();
    this.rulesError = errorLine();
    this.switches = h("dl", { class: "console-switches" });
    this.multBox = h("div", {});
    this.multStatus = statusLine();
    this.multError = errorLine();
    this.uploadsBox = h("div", {});
    fill(
      body,
      h(
        "section",
        { "aria-labelledby": "console-rates-heading" },
        h("h2", { id: "console-rates-heading", text: "Rate limits" }),
        h("p", {
          class: "hint",
          text: "“N per T, bursts of B”: B actions at once, then N every T. A change applies to the next action and is kept across restarts.",
        }),
        this.rulesBox,
        this.editBox,
        this.rulesStatus,
        this.rulesError,
        h("h3", { text: "Set when the node starts (read-only here)" }),
        this.switches,
      ),
      h(
        "section",
        { "aria-labelledby": "console-mult-heading" },
        h("h2", { id: "console-mult-heading", text: "Role multipliers" }),
        h("p", {
          class: "hint",
          text: "A role's limits for messages, reactions and models are the rule times its multiplier (0.01 to 1000; empty means 1). The owner is never limited.",
        }),
        this.multBox,
        this.multStatus,
        this.multError,
      ),
      h(
        "section",
        { "aria-labelledby": "console-uploads-heading" },
        h("h2", { id: "console-uploads-heading", text: "Uploads" }),
        this.uploadsBox,
      ),
    );
    this.load();
    window.addEventListener("focus", this.onFocus);
  }

  hide() {
    window.removeEventListener("focus", this.onFocus);
    this.body = null;
  }

  /** The window is back: read again if nothing is being edited and the
   * role still allows it (asked first: no refused call after a demotion). */
  async focused() {
    if (!this.body || this.editing !== null || this.multipliersDirty()) return;
    try {
      const me = await this.app.api.get("/api/auth/me");
      if (!me.permissions.includes("mesh.settings")) return;
    } catch {
      return;
    }
    if (this.body && this.editing === null && !this.multipliersDirty()) this.load();
  }

  async load() {
    const { store } = this.app;
    try {
      const [settings, stats, roles] = await Promise.all([
        this.app.api.get("/api/admin/mesh/settings"),
        store.can("admin.stats") ? this.app.api.get("/api/admin/stats").catch(() => null) : null,
        this.app.api.get("/api/roles").catch(() => []),
      ]);
      this.settings = settings;
      this.stats = stats;
      this.roles = roles;
    } catch (error) {
      this.rulesError.textContent = reason(error);
      return;
    }
    if (!this.body) return;
    this.renderRules();
    this.renderSwitches();
    this.renderMultipliers();
    this.renderUploads();
  }

  // rules -------------------------------------------------------------------------

  renderRules() {
    const refused = (this.stats && this.stats.rateLimits && this.stats.rateLimits.refused) || {};
    const headings = ["Rule", "Limit", "Counted per", "Set by"];
    if (this.stats) headings.push("Refused since start");
    headings.push("Actions");
    const rows = Object.entries(this.settings.rateLimits).map(([name, rule]) => {
      const cells = [
        h("span", {}, h("code", { text: name }), h("br"), h("span", { class: "hint", text: RULES[name] || "" })),
        h("span", { class: rule.off ? "console-off" : "", text: describeRate(rule) }),
        rule.scope,
        rule.source === "admin" ? "this console" : "node settings",
      ];
      if (this.stats) cells.push(String(refused[name] || refused[snake(name)] || 0));
      cells.push(
        h("button", {
          type: "button",
          class: "small",
          text: "Edit",
          "aria-label": `Edit the ${name} limit`,
          on: { click: () => this.edit(name) },
        }),
      );
      return cells;
    });
    fill(this.rulesBox, table("Rate limit rules", headings, rows));
  }

  edit(name) {
    const rule = this.settings.rateLimits[name];
    this.editing = name;
    const count = h("input", { type: "number", min: "1", max: "1000000", step: "1", value: rule.off ? "" : String(rule.count) });
    const per = h("input", { type: "number", min: "0.001", max: "86400", step: "any", value: rule.off ? "" : String(rule.per) });
    const burst = h("input", { type: "number", min: "1", max: "1000000", step: "1", value: rule.off ? "" : String(rule.burst) });
    const off = h("input", { type: "checkbox", checked: rule.off });
    const numbers = [count, per, burst];
    const sync = () => {
      for (const input of numbers) {
        input.disabled = off.checked;
        input.required = !off.checked && input !== burst;
      }
    };
    off.addEventListener("change", sync);
    sync();
    const save = h("button", { type: "submit", class: "primary", text: "Save limit" });
    const reset = h("button", {
      type: "button",
      text: "Back to default",
      on: { click: () => this.put(name, "default", reset) },
    });
    const cancel = h("button", { type: "button", text: "Cancel", on: { click: () => this.closeEdit() } });
    const heading = h("h3", { tabindex: "-1" }, "Edit the ", h("code", { text: name }), " limit");
    this.editBox.hidden = false;
    fill(
      this.editBox,
      h(
        "form",
        {
          class: "console-form",
          "aria-label": `The ${name} limit`,
          on: {
            submit: (e) => {
              e.preventDefault();
              if (off.checked) return this.put(name, "off", save);
              const value = { count: Number(count.value), per: Number(per.value) };
              if (burst.value !== "") value.burst = Number(burst.value);
              return this.put(name, value, save);
            },
          },
        },
        heading,
        h("p", { class: "hint", text: `Now: ${describeRate(rule)} (${rule.scope}).` }),
        h(
          "div",
          { class: "console-rate-fields" },
          field("Count", count),
          field("Per (seconds)", per),
          field("Burst", burst, "Empty: the same as the count."),
        ),
        h("label", { class: "console-check" }, off, h("span", { text: "Off (no limit)" })),
        h("div", { class: "row" }, save, reset, cancel),
      ),
    );
    heading.focus();
  }

  closeEdit() {
    const name = this.editing;
    this.editing = null;
    this.editBox.hidden = true;
    this.editBox.replaceChildren();
    if (name) {
      const button = this.rulesBox.querySelector(`button[aria-label="Edit the ${name} limit"]`);
      if (button) button.focus();
    }
  }

  async put(name, value, button) {
    this.rulesStatus.textContent = "";
    const saved = await guarded(button, this.rulesError, () =>
      this.app.api.put("/api/admin/mesh/settings", { rateLimits: { [name]: value } }),
    );
    if (!saved) return;
    this.settings = saved;
    this.closeEdit();
    this.renderRules();
    this.renderSwitches();
    const rule = saved.rateLimits[name];
    this.rulesStatus.textContent =
      value === "default" ? `${name} is back to the node's setting: ${describeRate(rule)}.` : `${name} is now ${describeRate(rule)}.`;
  }

  renderSwitches() {
    const s = this.settings;
    const exempt = s.rateLimitExemptAddresses || [];
    fill(
      this.switches,
      h("dt", { text: "Rate limits enabled" }),
      h("dd", { text: s.rateLimitsEnabled ? "Yes (MESH_RATE_LIMITS)" : "No: every rule is off (MESH_RATE_LIMITS=off)" }),
      h("dt", { text: "Addresses the per-address rules skip" }),
      h("dd", {}, exempt.length ? h("ul", { class: "console-plain-list" }, exempt.map((a) => h("li", {}, h("code", { text: a })))) : "none"),
    );
  }

  // multipliers -------------------------------------------------------------------------

  multipliersDirty() {
    if (!this.multInputs || !this.settings) return false;
    const now = this.multValues();
    const before = this.settings.roleMultipliers;
    const keys = new Set([...Object.keys(now), ...Object.keys(before)]);
    return [...keys].some((k) => now[k] !== before[k]);
  }

  multValues() {
    const map = {};
    for (const [role, input] of this.multInputs) {
      if (input.value.trim() !== "") map[role] = Number(input.value);
    }
    return map;
  }

  renderMultipliers() {
    const current = this.settings.roleMultipliers || {};
    const names = this.roles.length ? this.roles.filter((r) => r.name !== "owner").sort((a, b) => b.priority - a.priority).map((r) => r.name) : Object.keys(current);
    for (const name of Object.keys(current)) if (!names.includes(name)) names.push(name);
    this.multInputs = new Map();
    const rows = names.map((name) => {
      const input = h("input", {
        type: "number",
        min: "0.01",
        max: "1000",
        step: "any",
        placeholder: "1",
        "aria-label": `Multiplier of ${name}`,
        value: current[name] === undefined ? "" : String(current[name]),
      });
      this.multInputs.set(name, input);
      return [h("bdi", { text: name }), input];
    });
    const save = h("button", { type: "submit", class: "primary", text: "Save multipliers" });
    const reset = h("button", {
      type: "button",
      text: "Back to defaults",
      on: { click: () => this.putMultipliers("default", reset) },
    });
    fill(
      this.multBox,
      h(
        "form",
        {
          class: "console-mult",
          on: {
            submit: (e) => {
              e.preventDefault();
              return this.putMultipliers(this.multValues(), save);
            },
          },
        },
        table("Multiplier per role", ["Role", "Multiplier"], rows),
        h("p", { class: "hint", text: `Set by ${this.settings.roleMultipliersSource === "admin" ? "this console" : "the node's settings"}.` }),
        h("div", { class: "row" }, save, reset),
      ),
    );
  }

  async putMultipliers(value, button) {
    this.multStatus.textContent = "";
    const saved = await guarded(button, this.multError, () =>
      this.app.api.put("/api/admin/mesh/settings", { roleMultipliers: value }),
    );
    if (!saved) return;
    this.settings = saved;
    this.renderMultipliers();
    this.multStatus.textContent = value === "default" ? "Multipliers are back to the node's settings." : "Multipliers saved.";
  }

  // uploads ------------------------------------------------------------------------------

  renderUploads() {
    const holding = (permission) =>
      this.roles
        .filter((r) => r.permissions.includes(permission))
        .sort((a, b) => b.priority - a.priority)
        .map((r) => r.name);
    const may = holding("files.upload");
    const unlimited = holding("files.unlimited");
    const uploads = this.stats && this.stats.uploads;
    fill(
      this.uploadsBox,
      h(
        "dl",
        { class: "console-switches" },
        h("dt", { text: "Roles that may upload (files.upload)" }),
        h("dd", { text: may.length ? may.join(", ") : "none" }),
        h("dt", { text: "Roles not counted against the quota (files.unlimited)" }),
        h("dd", { text: unlimited.length ? unlimited.join(", ") : "none" }),
        uploads
          ? Object.entries(uploads).map(([k, v]) => [h("dt", { text: k }), h("dd", { text: String(v) })])
          : null,
      ),
      h("p", {
        class: "hint",
        text:
          "The size of one file (MESH_MAX_UPLOAD_BYTES, 10 MB by default) and the bytes one participant may keep " +
          "(MESH_UPLOAD_QUOTA_BYTES, 1 GB by default) are set when the node starts; the node does not report them, " +
          "nor how much is stored, through its API. Change who may upload in Roles.",
      }),
    );
  }
}

function snake(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
