// The console's "Room rules" section (#console/rules): a room's preset
// (POST /api/rooms/:id/permissions/preset) and its overrides
// (GET/POST/DELETE /api/rooms/:id/permissions), per role as a grid of
// allow / deny / inherit, and per participant.
//
// The node has no list of presets to ask for: the four below are those
// docs/roles.md documents (and the node's ApplyPreset accepts).

import { fill, h } from "./dom.js";
import { errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { seg } from "./api.js";

/** the permissions a room's rules decide (the node's ROOM_PERMISSIONS) */
const ROOM_PERMISSIONS = [
  ["rooms.read", "Read"],
  ["rooms.join", "Join"],
  ["messages.send", "Post"],
  ["messages.react", "React"],
  ["messages.edit", "Edit others'"],
  ["messages.delete", "Delete others'"],
];

const PRESETS = [
  ["announcements", "Announcements", "Only moderators and above post; others read and react."],
  ["humans_only", "Humans only", "Bots may not join, post or react; bots in the room are removed at once."],
  ["read_only", "Read only", "Nobody below admin posts or reacts."],
  ["default", "Default", "No preset, and every override of the room cleared."],
];
const PRESET_NAMES = new Map(PRESETS.map(([id, text]) => [id, text]));

/** Roles at or above this priority are not restricted by room rules. */
const ADMIN = 900;

const byName = (a, b) => a.name.localeCompare(b.name, undefined, { sensitivity: "base" });

export class RulesSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.roomId = "";
    this.rules = null;
    this.roles = [];
    this.participants = [];
  }

  get myPriority() {
    const me = this.app.store.me;
    return me && typeof me.priority === "number" ? me.priority : 0;
  }

  render(body) {
    this.body = body;
    this.rules = null;
    this.roomSelect = h("select", { on: { change: () => this.chooseRoom(this.roomSelect.value) } });
    this.pickError = errorLine();
    this.detail = h("div", { class: "console-rules" });
    fill(
      body,
      h(
        "section",
        { "aria-labelledby": "console-rules-heading" },
        h("h2", { id: "console-rules-heading", text: "Room rules" }),
        h("p", {
          class: "hint",
          text:
            "Rules change what roles and participants may do in one room. Admins and the owner are never restricted by them. " +
            "A participant's rule wins over a role's rule, which wins over the preset, which wins over the role's own permissions.",
        }),
        field("Room", this.roomSelect),
        this.pickError,
      ),
      this.detail,
    );
    this.load();
  }

  hide() {
    this.body = null;
  }

  onEvent(event) {
    if (!this.body) return;
    if (event.type === "room_deleted" && event.roomId === this.roomId) {
      this.roomId = "";
      this.load();
    }
  }

  async load() {
    try {
      const [rooms, roles, participants] = await Promise.all([
        this.app.api.rooms(),
        this.app.api.get("/api/roles"),
        this.app.api.get("/api/participants").catch(() => [...this.app.store.participants.values()]),
      ]);
      this.roles = roles;
      this.participants = participants.sort(byName);
      const own = rooms.filter((r) => r.kind !== "dm").sort(byName);
      fill(
        this.roomSelect,
        h("option", { value: "", text: "Choose a room…" }),
        own.map((r) => h("option", { value: r.roomId, text: `#${r.name}` })),
      );
      if (!this.roomId || !own.some((r) => r.roomId === this.roomId)) {
        this.roomId = own.length === 1 ? own[0].roomId : "";
      }
      this.roomSelect.value = this.roomId;
      this.pickError.textContent = "";
    } catch (error) {
      this.pickError.textContent = reason(error);
      return;
    }
    if (this.body) this.chooseRoom(this.roomId);
  }

  async chooseRoom(roomId) {
    this.roomId = roomId;
    if (!roomId) {
      fill(this.detail, h("p", { class: "hint", text: "Choose a room to see and change its rules." }));
      return;
    }
    try {
      this.rules = await this.app.api.get(`/api/rooms/${seg(roomId)}/permissions`);
    } catch (error) {
      fill(this.detail, h("p", { class: "error", role: "alert", text: reason(error) }));
      return;
    }
    if (this.body && this.roomId === roomId) this.renderRules();
  }

  /** Read the room's rules again and draw them; *statusText* goes to the
   * status line of the part *key* (preset, grid, person, list). */
  async reload(statusText, key) {
    try {
      this.rules = await this.app.api.get(`/api/rooms/${seg(this.roomId)}/permissions`);
    } catch (error) {
      this.pickError.textContent = reason(error);
      return;
    }
    if (!this.body) return;
    this.renderRules();
    if (statusText) this.lines[key][0].textContent = statusText;
  }

  roomName() {
    const option = [...this.roomSelect.options].find((o) => o.value === this.roomId);
    return option ? option.textContent : "this room";
  }

  nameOf(participantId) {
    const p = this.participants.find((x) => x.participantId === participantId);
    return p ? p.name : participantId;
  }

  renderRules() {
    const rules = this.rules;
    this.lines = {};
    for (const key of ["preset", "grid", "person", "list"]) this.lines[key] = [statusLine(), errorLine()];
    fill(this.detail, this.presetPart(rules), this.gridPart(rules), this.participantPart(rules), this.listPart(rules));
  }

  // preset ------------------------------------------------------------------------------

  presetPart(rules) {
    const name = `preset-${Date.now()}`;
    const inputs = PRESETS.map(([id]) => h("input", { type: "radio", name, value: id, checked: (rules.preset || "default") === id }));
    const [status, error] = this.lines.preset;
    const button = h("button", { type: "submit", class: "primary", text: "Apply preset" });
    const current = rules.preset ? PRESET_NAMES.get(rules.preset) || rules.preset : "none";
    return h(
      "section",
      { "aria-labelledby": "console-preset-heading" },
      h("h2", { id: "console-preset-heading", text: `Preset of ${this.roomName()}` }),
      h("p", { class: "console-current", text: `Current preset: ${current}.` }),
      h(
        "form",
        {
          "aria-labelledby": "console-preset-heading",
          on: {
            submit: async (e) => {
              e.preventDefault();
              const chosen = inputs.find((i) => i.checked);
              if (!chosen) return;
              const preset = chosen.value;
              const done = await guarded(button, error, () =>
                this.app.api.post(`/api/rooms/${seg(this.roomId)}/permissions/preset`, { preset }),
              );
              if (!done) return;
              await this.reload(
                preset === "default"
                  ? "Preset and overrides cleared."
                  : `Applied the preset ${PRESET_NAMES.get(preset)}.`,
                "preset",
              );
            },
          },
        },
        h(
          "fieldset",
          {},
          h("legend", { text: "Preset" }),
          PRESETS.map(([, text, hint], i) =>
            h("label", {}, inputs[i], h("span", { text }), h("span", { class: "hint console-choice-hint", text: hint })),
          ),
        ),
        h("div", { class: "row console-actions" }, button),
      ),
      status,
      error,
    );
  }

  // role grid ------------------------------------------------------------------------------

  gridPart(rules) {
    const roleRules = new Map();
    for (const o of rules.overrides) {
      if (o.targetType === "role") roleRules.set(`${o.target}\n${o.permission}`, o);
    }
    const roles = this.roles
      .filter((r) => r.priority < ADMIN && r.priority < this.myPriority)
      .sort((a, b) => b.priority - a.priority);
    const rows = roles.map((role) => [
      h("bdi", { text: role.name }),
      ...ROOM_PERMISSIONS.map(([permission, label]) => {
        const o = roleRules.get(`${role.name}\n${permission}`);
        const holds = role.permissions.includes(permission);
        const select = h(
          "select",
          {
            "aria-label": `${role.name}: ${label} (${permission})`,
            class: o ? `console-effect ${o.effect}` : "console-effect",
            on: { change: (e) => this.setRoleRule(role.name, permission, e.currentTarget, o) },
          },
          h("option", { value: "inherit", text: `Inherit (${holds ? "yes" : "no"})` }),
          h("option", { value: "allow", text: "Allow", disabled: !this.app.store.can(permission) }),
          h("option", { value: "deny", text: "Deny" }),
        );
        select.value = o ? o.effect : "inherit";
        return select;
      }),
    ]);
    return h(
      "section",
      { "aria-labelledby": "console-grid-heading" },
      h("h2", { id: "console-grid-heading", text: "Rules per role" }),
      h("p", {
        class: "hint",
        text: "Inherit: the preset, else the role's own permission (shown in brackets). A change applies at once.",
      }),
      table(
        `Role rules in ${this.roomName()}`,
        ["Role", ...ROOM_PERMISSIONS.map(([p, label]) => `${label} (${p})`)],
        rows,
      ),
      ...this.lines.grid,
    );
  }

  async setRoleRule(role, permission, select, existing) {
    const effect = select.value;
    const [status, error] = this.lines.grid;
    status.textContent = "";
    select.disabled = true;
    const ok = await guarded(null, error, async () => {
      if (effect === "inherit") {
        if (existing) {
          await this.app.api.delete(
            `/api/rooms/${seg(this.roomId)}/permissions?overrideId=${encodeURIComponent(existing.overrideId)}`,
          );
        }
      } else {
        await this.app.api.post(`/api/rooms/${seg(this.roomId)}/permissions`, {
          targetType: "role",
          target: role,
          permission,
          effect,
        });
      }
      return true;
    });
    select.disabled = false;
    if (!ok) {
      select.value = existing ? existing.effect : "inherit";
      return;
    }
    const said = effect === "inherit" ? `${role} inherits ${permission}` : `${permission} ${effect === "allow" ? "allowed" : "denied"} to ${role}`;
    await this.reload(`Saved: ${said}.`, "grid");
    const again = this.detail.querySelector(`select[aria-label^="${CSS.escape(role)}: "][aria-label$="(${permission})"]`);
    if (again) again.focus();
  }

  // participant rules ---------------------------------------------------------------------------

  participantPart() {
    const who = h(
      "select",
      { required: true },
      h("option", { value: "", text: "Choose a participant…" }),
      this.participants.map((p) => h("option", { value: p.participantId, text: `${p.name} (${p.role})` })),
    );
    const permission = h(
      "select",
      { required: true },
      ROOM_PERMISSIONS.map(([p, label]) => h("option", { value: p, text: `${label} (${p})` })),
    );
    const effect = h(
      "select",
      {},
      h("option", { value: "deny", text: "Deny" }),
      h("option", { value: "allow", text: "Allow" }),
    );
    const button = h("button", { type: "submit", class: "primary", text: "Add rule" });
    const [status, error] = this.lines.person;
    return h(
      "section",
      { "aria-labelledby": "console-person-rule-heading" },
      h("h2", { id: "console-person-rule-heading", text: "A rule for one participant" }),
      h(
        "form",
        {
          class: "console-inline-form",
          "aria-labelledby": "console-person-rule-heading",
          on: {
            submit: async (e) => {
              e.preventDefault();
              if (!who.value) {
                error.textContent = "Choose a participant.";
                return;
              }
              const body = { targetType: "participant", target: who.value, permission: permission.value, effect: effect.value };
              const done = await guarded(button, error, () =>
                this.app.api.post(`/api/rooms/${seg(this.roomId)}/permissions`, body),
              );
              if (!done) return;
              await this.reload(`Saved: ${body.permission} ${body.effect === "allow" ? "allowed" : "denied"} to ${this.nameOf(body.target)}.`, "person");
            },
          },
        },
        field("Participant", who),
        field("Permission", permission),
        field("Effect", effect),
        h("div", { class: "row console-actions" }, button),
      ),
      status,
      error,
    );
  }

  // every override ----------------------------------------------------------------------------------

  listPart(rules) {
    const rows = rules.overrides.map((o) => {
      const target = o.targetType === "role" ? `role ${o.target}` : this.nameOf(o.target);
      const remove = h("button", {
        type: "button",
        class: "small",
        text: "Remove",
        "aria-label": `Remove the rule ${o.permission} for ${target}`,
        on: {
          click: async (e) => {
            const done = await guarded(e.currentTarget, this.lines.list[1], () =>
              this.app.api.delete(`/api/rooms/${seg(this.roomId)}/permissions?overrideId=${encodeURIComponent(o.overrideId)}`),
            );
            if (done !== undefined) await this.reload(`Removed the rule ${o.permission} for ${target}.`, "list");
          },
        },
      });
      return [
        h("bdi", { text: target }),
        h("code", { text: o.permission }),
        h("span", { class: `console-effect-text ${o.effect}`, text: o.effect === "allow" ? "Allowed" : "Denied" }),
        remove,
      ];
    });
    return h(
      "section",
      { "aria-labelledby": "console-list-heading" },
      h("h2", { id: "console-list-heading", text: "Every rule of this room" }),
      rows.length
        ? table(`Overrides in ${this.roomName()}`, ["For", "Permission", "Effect", "Actions"], rows)
        : h("p", { class: "hint", text: "No overrides: the preset and the roles' own permissions decide." }),
      ...this.lines.list,
    );
  }
}
