// The console's "Mesh" section (#console/settings): the mesh's settings
// (GET/PUT /api/admin/mesh/settings), the setup checklist
// (GET /api/admin/setup-status) and the statistics (GET /api/admin/stats).
//
// The node sends no event when another admin changes the settings, so the
// section reads them again each time it is shown and when the window gets
// the focus back (unless the form holds unsaved changes).

import { $, fill, formatBytes, h } from "./dom.js";
import { errorLine, field, guarded, reason, statusLine } from "./view.js";

const VISIBILITY = [
  ["public", "Public", "Anyone may look in as a guest; guests read (and post if allowed below)."],
  ["private", "Private", "Only participants with an account; guests' tokens stop working at once."],
];
const REGISTRATION = [
  ["open", "Open", "Anyone may create an account, and bots may bootstrap themselves."],
  ["closed", "Closed", "New accounts only by an admin (existing participants keep their access)."],
];

let formCount = 0;

/** A group of radio buttons in a fieldset; returns [fieldset, getValue, setValue]. */
function radios(legend, name, choices) {
  const inputs = choices.map(([value]) => h("input", { type: "radio", name, value }));
  const set = h(
    "fieldset",
    {},
    h("legend", { text: legend }),
    choices.map(([, text, hint], i) =>
      h("label", {}, inputs[i], h("span", { text }), h("span", { class: "hint console-choice-hint", text: hint })),
    ),
  );
  const get = () => {
    const chosen = inputs.find((input) => input.checked);
    return chosen ? chosen.value : null;
  };
  const put = (value) => {
    for (const input of inputs) input.checked = input.value === value;
  };
  return [set, get, put];
}

function seconds(total) {
  const s = Math.floor(total);
  const days = Math.floor(s / 86400);
  const hours = Math.floor((s % 86400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  if (days) return `${days} d ${hours} h`;
  if (hours) return `${hours} h ${minutes} min`;
  if (minutes) return `${minutes} min ${s % 60} s`;
  return `${s} s`;
}

/** Free space in a folder's filesystem against the floor the node keeps. */
function diskRows(disk) {
  if (disk.error) {
    return [["Status", `Cannot measure free space (${disk.error}): uploads and app sources are refused`]];
  }
  const low = disk.floor > 0 && disk.free < disk.floor;
  return [
    ["Free space", `${formatBytes(disk.free)} of ${formatBytes(disk.total)}`],
    ["Floor", disk.floor > 0 ? formatBytes(disk.floor) : "none"],
    ["Status", low ? "Below the floor: uploads and app sources are refused" : "Above the floor"],
  ];
}

/** KINDS of fault (quart_mesh/faults.py) as people say them. */
const FAULTS = {
  disk_full: "Disk full",
  store_unavailable: "Store unavailable",
  store_corrupt: "Store damaged",
  descriptors: "Out of file descriptors",
  peer_down: "Federation peer down",
  receiver_failing: "Webhook receiver failing",
};

/** One row per active fault (its kind and key; since when, how many
 * failures, the latest cause), or one saying there is none. */
function faultRows(faults) {
  if (!faults.length) return [["Faults", "none"]];
  return faults.map((f) => [
    f.key ? `${FAULTS[f.kind] || f.kind} (${f.key})` : FAULTS[f.kind] || f.kind,
    `since ${new Date(f.since).toLocaleString()}, ${n(f.failures)} failure${f.failures === 1 ? "" : "s"}: ${f.cause}`,
  ]);
}

const number = new Intl.NumberFormat();
const n = (value) => (typeof value === "number" ? number.format(value) : "—");

export class SettingsSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.loaded = null; // the settings as last read or saved
    this.onFocus = () => this.focused();
  }

  render(body) {
    this.body = body;
    const { store } = this.app;
    const parts = [];
    if (store.can("mesh.settings")) parts.push(this.settingsPart());
    if (store.can("admin.stats")) parts.push(this.checklistPart(), this.statsPart());
    fill(body, ...parts);
    if (store.can("mesh.settings")) this.refreshSettings(true);
    if (store.can("admin.stats")) {
      this.refreshChecklist();
      this.refreshStats();
    }
    window.addEventListener("focus", this.onFocus);
  }

  hide() {
    window.removeEventListener("focus", this.onFocus);
    this.body = null;
  }

  onEvent(event) {
    // a room deleted elsewhere leaves the default room's list
    if (this.body && this.form && event.type === "room_deleted") this.refreshRooms();
  }

  /** The window is back: read the settings again if the role still allows
   * it (asked first, so a role taken away meanwhile costs no refused call). */
  async focused() {
    if (!this.body || !this.form) return;
    try {
      const me = await this.app.api.get("/api/auth/me");
      if (!me.permissions.includes("mesh.settings")) return;
    } catch {
      return;
    }
    this.refreshSettings(false);
  }

  // settings --------------------------------------------------------------------

  settingsPart() {
    formCount += 1;
    const f = {};
    f.name = h("input", { type: "text", required: true, maxlength: "200", autocomplete: "off" });
    f.description = h("textarea", { rows: "3" });
    [f.visibilitySet, f.visibility, f.setVisibility] = radios("Visibility", `visibility-${formCount}`, VISIBILITY);
    [f.registrationSet, f.registration, f.setRegistration] = radios(
      "Registration",
      `registration-${formCount}`,
      REGISTRATION,
    );
    f.guests = h("input", { type: "checkbox" });
    f.registry = h("input", { type: "checkbox" });
    f.previews = h("input", { type: "checkbox" });
    f.defaultRoom = h("select", {});
    f.status = statusLine();
    f.error = errorLine();
    f.save = h("button", { type: "submit", class: "primary", text: "Save settings" });
    f.revert = h("button", {
      type: "button",
      text: "Discard changes",
      on: { click: () => this.fillForm(this.loaded) },
    });
    this.form = f;
    const form = h(
      "form",
      { class: "console-form", "aria-labelledby": `mesh-settings-${formCount}`, on: { submit: (e) => this.save(e) } },
      field("Mesh name", f.name),
      field("Description", f.description, "Shown to visitors and in the mesh's manifest. Leave empty for none."),
      f.visibilitySet,
      f.registrationSet,
      h("label", { class: "console-check" }, f.guests, h("span", { text: "Guests may post messages" })),
      h(
        "label",
        { class: "console-check" },
        f.registry,
        h("span", { text: "List other public meshes (this node is a registry)" }),
      ),
      h("p", {
        class: "hint",
        text: "Other nodes may then announce their public meshes here; each is listed only while its address serves its own manifest.",
      }),
      h("label", { class: "console-check" }, f.previews, h("span", { text: "Show previews of links in messages" })),
      h("p", {
        class: "hint",
        text: "This node fetches the linked page (public addresses only) and shows its title, description and image under the message.",
      }),
      field("Default room", f.defaultRoom, "The room offered to people who are in none."),
      h("div", { class: "row" }, f.save, f.revert),
      f.status,
      f.error,
    );
    return h("section", {}, h("h2", { id: `mesh-settings-${formCount}`, text: "Mesh settings" }), form);
  }

  values() {
    const f = this.form;
    return {
      name: f.name.value,
      description: f.description.value,
      visibility: f.visibility(),
      registrationMode: f.registration(),
      guestsCanSend: f.guests.checked,
      registryEnabled: f.registry.checked,
      linkPreviews: f.previews.checked,
      defaultRoomId: f.defaultRoom.value,
    };
  }

  /** The fields whose value differs from the settings last read. */
  changes() {
    if (!this.loaded) return {};
    const now = this.values();
    const changed = {};
    for (const [key, value] of Object.entries(now)) {
      const before = this.loaded[key] === null || this.loaded[key] === undefined ? "" : this.loaded[key];
      if (value !== null && value !== before) changed[key] = value;
    }
    return changed;
  }

  fillForm(settings) {
    if (!settings || !this.form) return;
    const f = this.form;
    f.name.value = settings.name;
    f.description.value = settings.description || "";
    f.setVisibility(settings.visibility);
    f.setRegistration(settings.registrationMode);
    f.guests.checked = Boolean(settings.guestsCanSend);
    f.registry.checked = Boolean(settings.registryEnabled);
    f.previews.checked = Boolean(settings.linkPreviews);
    this.chooseRoom(settings.defaultRoomId || "");
  }

  chooseRoom(roomId) {
    const select = this.form.defaultRoom;
    if (roomId && ![...select.options].some((o) => o.value === roomId)) {
      select.append(h("option", { value: roomId, text: `(room ${roomId})` }));
    }
    select.value = roomId;
  }

  async refreshRooms() {
    const select = this.form.defaultRoom;
    const keep = select.value;
    let rooms = [];
    try {
      rooms = await this.app.api.rooms();
    } catch {
      rooms = [...this.app.store.rooms.values()];
    }
    const own = rooms
      .filter((r) => r.kind !== "dm" && !r.origin)
      .sort((a, b) => a.name.localeCompare(b.name, undefined, { sensitivity: "base" }));
    fill(
      select,
      h("option", { value: "", text: "None" }),
      own.map((r) => h("option", { value: r.roomId, text: `#${r.name}` })),
    );
    this.chooseRoom(keep);
  }

  /** Read the settings; *force*: replace the form even if it holds edits. */
  async refreshSettings(force) {
    if (!this.body || !this.form) return;
    const f = this.form;
    try {
      const [settings] = await Promise.all([this.app.api.get("/api/admin/mesh/settings"), this.refreshRooms()]);
      if (!force && Object.keys(this.changes()).length) {
        // someone is editing: keep their values, remember the node's
        this.loaded = settings;
        return;
      }
      this.loaded = settings;
      this.fillForm(settings);
    } catch (error) {
      f.error.textContent = reason(error);
    }
  }

  async save(event) {
    event.preventDefault();
    const f = this.form;
    f.status.textContent = "";
    const changed = this.changes();
    if (!Object.keys(changed).length) {
      f.error.textContent = "";
      f.status.textContent = "Nothing to save: no field was changed.";
      return;
    }
    const saved = await guarded(f.save, f.error, () => this.app.api.put("/api/admin/mesh/settings", changed));
    if (!saved) return;
    this.loaded = saved;
    this.fillForm(saved);
    const names = { name: "name", description: "description", visibility: "visibility",
      registrationMode: "registration", guestsCanSend: "guests' posting", registryEnabled: "registry",
      linkPreviews: "link previews", defaultRoomId: "default room" };
    f.status.textContent = `Saved: ${Object.keys(changed).map((k) => names[k]).join(", ")}.`;
    this.showInPage(saved);
    if (this.app.store.can("admin.stats")) this.refreshChecklist();
  }

  /** The page's own copy of the public settings (top bar, title). */
  showInPage(saved) {
    const status = this.app.store.status;
    if (!status) return;
    status.meshName = saved.name;
    status.visibility = saved.visibility;
    status.registrationMode = saved.registrationMode;
    status.defaultRoomId = saved.defaultRoomId || null;
    const top = $("mesh-name");
    if (top) top.textContent = saved.name;
    if (typeof this.app.renderTitle === "function") this.app.renderTitle();
  }

  // checklist ---------------------------------------------------------------------

  checklistPart() {
    this.checklist = h("ol", { class: "console-checklist" });
    this.checklistSummary = h("p", { class: "hint" });
    this.checklistError = errorLine();
    return h(
      "section",
      { "aria-labelledby": "console-checklist-heading" },
      h("h2", { id: "console-checklist-heading", text: "Setup checklist" }),
      this.checklistSummary,
      this.checklist,
      this.checklistError,
    );
  }

  async refreshChecklist() {
    try {
      const status = await this.app.api.get("/api/admin/setup-status");
      const done = status.steps.filter((s) => s.done).length;
      this.checklistSummary.textContent = status.complete
        ? "Every step is done."
        : `${done} of ${status.steps.length} steps done.`;
      fill(
        this.checklist,
        status.steps.map((step) =>
          h(
            "li",
            { class: step.done ? "done" : "todo", dataset: { step: step.id } },
            h("span", { class: "console-state", text: step.done ? "Done" : "Not done" }),
            h("span", { text: step.label }),
          ),
        ),
      );
      this.checklistError.textContent = "";
    } catch (error) {
      this.checklistError.textContent = reason(error);
    }
  }

  // statistics --------------------------------------------------------------------

  statsPart() {
    this.stats = h("div", { class: "console-stats" });
    this.statsStatus = statusLine();
    this.statsError = errorLine();
    this.refreshButton = h("button", {
      type: "button",
      text: "Refresh",
      "aria-label": "Refresh statistics",
      on: { click: () => this.refreshStats(true) },
    });
    return h(
      "section",
      { "aria-labelledby": "console-stats-heading" },
      h("div", { class: "console-head" }, h("h2", { id: "console-stats-heading", text: "Statistics" }), this.refreshButton),
      this.stats,
      this.statsStatus,
      this.statsError,
    );
  }

  async refreshStats(announce = false) {
    const stats = await guarded(this.refreshButton, this.statsError, () => this.app.api.get("/api/admin/stats"));
    if (!stats || !this.body) return;
    const p = stats.participants || {};
    const b = stats.broker || {};
    const m = stats.models || {};
    const r = stats.rateLimits || {};
    const refused = Object.entries(r.refused || {});
    const groups = [
      [
        "People and rooms",
        [
          ["Participants", n(p.total)],
          ["Humans", n(p.humans)],
          ["Bots", n(p.bots)],
          ["Guests", n(p.guests)],
          ["Online now", n(p.online)],
          ["Rooms", n(stats.rooms)],
          ["Direct messages", n(stats.dms)],
          ["Messages", n(stats.messages)],
        ],
      ],
      [
        "Connections and broker",
        [
          ["WebSocket sessions", n(stats.websocketSessions)],
          ["Subscriptions", n(b.subscribers)],
          ["Events waiting", n(b.queuedEvents)],
          ["Cut off as lagging", n(b.drops)],
          ["Events published", n(b.published)],
          ["Rooms routed", n(b.rooms)],
        ],
      ],
      [
        "Models",
        [
          ["Requests", n(m.requests)],
          ["Errors", n(m.errors)],
          ["Prompt tokens", n(m.promptTokens)],
          ["Completion tokens", n(m.completionTokens)],
        ],
      ],
      [
        "Rate limits",
        [
          ["Enabled", r.enabled ? "Yes" : "No"],
          ["Keys remembered", n(r.trackedKeys)],
          ["Refused since start", refused.length ? refused.map(([k, v]) => `${k}: ${n(v)}`).join(", ") : "none"],
        ],
      ],
      [
        "Node",
        [
          ["Version", stats.version || "—"],
          ["Up for", typeof stats.uptime === "number" ? seconds(stats.uptime) : "—"],
        ],
      ],
    ];
    if (stats.disk) groups.push(["Disk", diskRows(stats.disk)]);
    if (stats.uploadsDisk) groups.push(["Uploads disk", diskRows(stats.uploadsDisk)]);
    groups.push(["Active faults", faultRows(stats.faults || [])]);
    if (stats.uploads) {
      const u = stats.uploads;
      groups.push([
        "Uploads",
        Object.entries(u).map(([k, v]) => [k, typeof v === "number" && /bytes/i.test(k) ? formatBytes(v) : n(v)]),
      ]);
    }
    fill(
      this.stats,
      groups.map(([title, rows]) =>
        h(
          "div",
          { class: "console-stat-group" },
          h("h3", { text: title }),
          h("dl", {}, rows.map(([term, value]) => [h("dt", { text: term }), h("dd", { text: String(value) })])),
        ),
      ),
    );
    if (announce) this.statsStatus.textContent = `Statistics refreshed at ${new Date().toLocaleTimeString()}.`;
  }
}
