// The console's "Roles" section (#console/roles): the roles and who holds
// them, assigning a role (PUT /api/participants/:id/role), custom roles
// (POST /api/roles, POST /api/roles/from-template, PUT and DELETE
// /api/roles/:roleId) and the permission catalog (GET /api/permissions).
//
// The node decides: one assigns only roles below one's own priority to
// participants below it, and creates or changes roles (roles.manage) only
// below it with permissions one holds. The page offers what fits these
// rules and shows the node's message when it refuses anyway.

import { fill, h } from "./dom.js";
import { errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { seg } from "./api.js";

const byName = (a, b) => a.name.localeCompare(b.name, undefined, { sensitivity: "base" });

export class RolesSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.roles = [];
    this.catalog = [];
    this.templates = [];
    this.participants = [];
    this.editing = null; // the custom role being edited
    this.confirming = null; // the roleId whose deletion awaits confirmation
  }

  get myPriority() {
    const me = this.app.store.me;
    return me && typeof me.priority === "number" ? me.priority : 0;
  }

  get manages() {
    return this.app.store.can("roles.manage");
  }

  render(body) {
    this.body = body;
    this.editing = null;
    this.confirming = null;
    this.rolesBox = h("div", {});
    this.rolesStatus = statusLine();
    this.rolesError = errorLine();
    const parts = [
      h(
        "section",
        { "aria-labelledby": "console-roles-heading" },
        h("h2", { id: "console-roles-heading", text: "Roles" }),
        h("p", {
          class: "hint",
          text: "Built-in roles cannot be changed. A role's priority ranks it: you assign and manage only roles below your own.",
        }),
        this.rolesBox,
        this.rolesStatus,
        this.rolesError,
      ),
      this.assignPart(),
    ];
    if (this.manages) {
      this.editBox = h("section", { hidden: true, "aria-labelledby": "console-edit-role-heading" });
      parts.push(this.editBox, this.createPart(), this.templatePart());
    }
    this.catalogBox = h("div", {});
    parts.push(
      h(
        "section",
        {},
        h("details", {}, h("summary", { text: "Permission catalog" }), this.catalogBox),
      ),
    );
    fill(body, ...parts);
    this.load();
  }

  hide() {
    this.body = null;
  }

  onEvent(event) {
    // a newcomer appears in the participant picker
    if (this.body && (event.type === "participant_joined" || event.type === "participant_left")) {
      const known = this.participants.some((p) => event.participant && p.participantId === event.participant.participantId);
      if (!known && event.participant) this.loadParticipants();
    }
  }

  async load() {
    try {
      const [roles, catalog, templates] = await Promise.all([
        this.app.api.get("/api/roles"),
        this.app.api.get("/api/permissions"),
        this.manages ? this.app.api.get("/api/roles/templates") : Promise.resolve([]),
      ]);
      this.roles = roles;
      this.catalog = catalog;
      this.templates = templates;
      await this.loadParticipants(false);
    } catch (error) {
      this.rolesError.textContent = reason(error);
      return;
    }
    if (!this.body) return;
    this.renderRoles();
    this.renderAssign();
    this.renderCatalog();
    if (this.manages) {
      this.renderPermissionBoxes(this.createPerms, new Set());
      this.renderTemplates();
    }
  }

  async loadParticipants(render = true) {
    try {
      this.participants = (await this.app.api.get("/api/participants")).sort(byName);
    } catch (error) {
      if (!render) throw error;
      this.assignError.textContent = reason(error);
      return;
    }
    if (render && this.body) {
      this.renderRoles();
      this.renderAssign();
    }
  }

  async reloadRoles() {
    const [roles, participants] = await Promise.all([
      this.app.api.get("/api/roles"),
      this.app.api.get("/api/participants"),
    ]);
    this.roles = roles;
    this.participants = participants.sort(byName);
    if (!this.body) return;
    this.renderRoles();
    this.renderAssign();
  }

  // the roles table -------------------------------------------------------------

  renderRoles() {
    const holders = new Map();
    for (const p of this.participants) holders.set(p.role, (holders.get(p.role) || 0) + 1);
    const rows = [...this.roles]
      .sort((a, b) => b.priority - a.priority)
      .map((role) => {
        const actions = [];
        if (this.manages && !role.builtin && role.priority < this.myPriority) {
          if (this.confirming === role.roleId) {
            actions.push(
              h(
                "span",
                { class: "console-confirm", role: "group", "aria-label": `Confirm deleting ${role.name}` },
                h("span", { text: "Delete for good? " }),
                h("button", {
                  type: "button",
                  class: "small danger",
                  text: `Delete ${role.name}`,
                  on: { click: (e) => this.remove(role, e.currentTarget) },
                }),
                h("button", {
                  type: "button",
                  class: "small",
                  text: "Keep",
                  "aria-label": `Keep ${role.name}`,
                  on: { click: () => this.askDelete(null) },
                }),
              ),
            );
          } else {
            actions.push(
              h("button", {
                type: "button",
                class: "small",
                text: "Edit",
                "aria-label": `Edit ${role.name}`,
                on: { click: () => this.edit(role) },
              }),
              " ",
              h("button", {
                type: "button",
                class: "small danger",
                text: "Delete",
                "aria-label": `Delete ${role.name}`,
                on: { click: () => this.askDelete(role.roleId) },
              }),
            );
          }
        }
        return [
          h("bdi", { text: role.name }),
          `${role.priority} (tier ${role.tier})`,
          role.builtin ? "Built-in" : "Custom",
          h("span", { title: role.permissions.join(", "), text: String(role.permissions.length) }),
          String(holders.get(role.name) || 0),
          actions.length ? h("span", { class: "row" }, actions) : "",
        ];
      });
    fill(
      this.rolesBox,
      table("Roles of this mesh", ["Role", "Priority", "Kind", "Permissions", "Holders", "Actions"], rows),
    );
  }

  askDelete(roleId) {
    this.confirming = roleId;
    this.renderRoles();
    const name = roleId ? this.roles.find((r) => r.roleId === roleId).name : null;
    const focus = name
      ? this.rolesBox.querySelector(".console-confirm button.danger")
      : null;
    if (focus) focus.focus();
  }

  async remove(role, button) {
    const done = await guarded(button, this.rolesError, () => this.app.api.delete(`/api/roles/${seg(role.roleId)}`));
    this.confirming = null;
    if (!done) {
      this.renderRoles();
      return;
    }
    this.rolesStatus.textContent = `Deleted the role ${role.name}.`;
    if (this.editing && this.editing.roleId === role.roleId) this.closeEdit();
    await this.reloadRoles().catch((error) => (this.rolesError.textContent = reason(error)));
  }

  // assigning -----------------------------------------------------------------------

  assignPart() {
    this.assignWho = h("select", { required: true });
    this.assignRole = h("select", { required: true });
    this.assignButton = h("button", { type: "submit", class: "primary", text: "Assign role" });
    this.assignStatus = statusLine();
    this.assignError = errorLine();
    return h(
      "section",
      { "aria-labelledby": "console-assign-heading" },
      h("h2", { id: "console-assign-heading", text: "Assign a role" }),
      h(
        "form",
        { class: "console-form", "aria-labelledby": "console-assign-heading", on: { submit: (e) => this.assign(e) } },
        field("Participant", this.assignWho),
        field("New role", this.assignRole, "Only roles below your own are offered."),
        h("div", { class: "row" }, this.assignButton),
        this.assignStatus,
        this.assignError,
      ),
    );
  }

  renderAssign() {
    const who = this.assignWho.value;
    const role = this.assignRole.value;
    fill(
      this.assignWho,
      h("option", { value: "", text: "Choose a participant…" }),
      this.participants.map((p) =>
        h("option", { value: p.participantId, text: `${p.name} (${p.role}${p.type !== "human" ? `, ${p.type}` : ""})` }),
      ),
    );
    fill(
      this.assignRole,
      h("option", { value: "", text: "Choose a role…" }),
      [...this.roles]
        .filter((r) => r.priority < this.myPriority)
        .sort((a, b) => b.priority - a.priority)
        .map((r) => h("option", { value: r.name, text: `${r.name} (${r.priority})` })),
    );
    this.assignWho.value = this.participants.some((p) => p.participantId === who) ? who : "";
    this.assignRole.value = [...this.assignRole.options].some((o) => o.value === role) ? role : "";
  }

  async assign(event) {
    event.preventDefault();
    this.assignStatus.textContent = "";
    const id = this.assignWho.value;
    const role = this.assignRole.value;
    if (!id || !role) {
      this.assignError.textContent = "Choose a participant and a role.";
      return;
    }
    const person = this.participants.find((p) => p.participantId === id);
    const done = await guarded(this.assignButton, this.assignError, () =>
      this.app.api.put(`/api/participants/${seg(id)}/role`, { role }),
    );
    if (!done) return;
    this.assignStatus.textContent = `${person ? person.name : "The participant"} is now ${role}.`;
    await this.reloadRoles().catch((error) => (this.assignError.textContent = reason(error)));
  }

  // creating and editing ----------------------------------------------------------------

  /** Checkboxes of the catalog, grouped by category, into *box*. */
  renderPermissionBoxes(box, chosen) {
    const mine = new Set(this.app.store.me ? this.app.store.me.permissions : []);
    const categories = new Map();
    for (const p of this.catalog) {
      if (!categories.has(p.category)) categories.set(p.category, []);
      categories.get(p.category).push(p);
    }
    fill(
      box,
      [...categories.entries()].map(([category, perms]) =>
        h(
          "fieldset",
          { class: "console-perms" },
          h("legend", { text: category }),
          perms.map((p) =>
            h(
              "label",
              { class: "console-check" },
              h("input", {
                type: "checkbox",
                value: p.name,
                checked: chosen.has(p.name),
                disabled: !mine.has(p.name) && !chosen.has(p.name),
              }),
              h("span", {}, h("code", { text: p.name }), " ", h("span", { class: "hint", text: p.description })),
            ),
          ),
        ),
      ),
    );
  }

  checked(box) {
    return [...box.querySelectorAll("input[type=checkbox]:checked")].map((input) => input.value);
  }

  roleFields(prefix) {
    const name = h("input", {
      type: "text",
      required: true,
      maxlength: "40",
      pattern: "[a-z][a-z0-9_\\-]*",
      autocomplete: "off",
    });
    const priority = h("input", { type: "number", required: true, min: "1", max: "998", step: "1" });
    const description = h("input", { type: "text", autocomplete: "off" });
    const perms = h("div", { class: "console-perm-groups" });
    return {
      name,
      priority,
      description,
      perms,
      nodes: [
        field(`${prefix}name`, name, "1–40 of a–z, 0–9, _ and -, starting with a letter."),
        field(`${prefix}priority`, priority, `1 to ${Math.min(998, this.myPriority - 1)}; below your own (${this.myPriority}).`),
        field(`${prefix}description`, description),
        h("p", { class: "console-subhead", text: "Permissions (the role holds exactly these)" }),
        perms,
      ],
    };
  }

  createPart() {
    const f = this.roleFields("Role ");
    f.button = h("button", { type: "submit", class: "primary", text: "Create role" });
    f.status = statusLine();
    f.error = errorLine();
    this.create = f;
    this.createPerms = f.perms;
    return h(
      "section",
      { "aria-labelledby": "console-create-heading" },
      h("h2", { id: "console-create-heading", text: "Create a custom role" }),
      h(
        "form",
        { class: "console-form", "aria-labelledby": "console-create-heading", on: { submit: (e) => this.createRole(e) } },
        f.nodes,
        h("div", { class: "row" }, f.button),
        f.status,
        f.error,
      ),
    );
  }

  async createRole(event) {
    event.preventDefault();
    const f = this.create;
    f.status.textContent = "";
    const body = {
      name: f.name.value.trim(),
      priority: Number(f.priority.value),
      permissions: this.checked(f.perms),
    };
    if (f.description.value.trim()) body.description = f.description.value.trim();
    const role = await guarded(f.button, f.error, () => this.app.api.post("/api/roles", body));
    if (!role) return;
    f.status.textContent = `Created the role ${role.name} with ${role.permissions.length} permissions.`;
    f.name.value = "";
    f.priority.value = "";
    f.description.value = "";
    this.renderPermissionBoxes(f.perms, new Set());
    await this.reloadRoles().catch((error) => (f.error.textContent = reason(error)));
  }

  templatePart() {
    const t = {};
    t.select = h("select", { required: true, on: { change: () => this.describeTemplate() } });
    t.about = h("p", { class: "hint", "aria-live": "polite" });
    t.name = h("input", { type: "text", autocomplete: "off", maxlength: "40" });
    t.priority = h("input", { type: "number", min: "1", max: "998", step: "1" });
    t.button = h("button", { type: "submit", class: "primary", text: "Create from template" });
    t.status = statusLine();
    t.error = errorLine();
    this.template = t;
    return h(
      "section",
      { "aria-labelledby": "console-template-heading" },
      h("h2", { id: "console-template-heading", text: "Create a role from a template" }),
      h(
        "form",
        { class: "console-form", "aria-labelledby": "console-template-heading", on: { submit: (e) => this.fromTemplate(e) } },
        field("Template", t.select),
        t.about,
        field("Name (optional)", t.name, "Leave empty for the template's name."),
        field("Priority (optional)", t.priority, "Leave empty for the template's priority."),
        h("div", { class: "row" }, t.button),
        t.status,
        t.error,
      ),
    );
  }

  renderTemplates() {
    const t = this.template;
    fill(
      t.select,
      this.templates.map((tpl) => h("option", { value: tpl.templateId, text: `${tpl.name} (${tpl.priority})` })),
    );
    this.describeTemplate();
  }

  describeTemplate() {
    const t = this.template;
    const tpl = this.templates.find((x) => x.templateId === t.select.value);
    t.about.textContent = tpl ? `${tpl.description}. Permissions: ${tpl.permissions.join(", ")}.` : "";
    if (tpl) {
      t.name.placeholder = tpl.name;
      t.priority.placeholder = String(tpl.priority);
    }
  }

  async fromTemplate(event) {
    event.preventDefault();
    const t = this.template;
    t.status.textContent = "";
    const body = { templateId: t.select.value };
    if (t.name.value.trim()) body.name = t.name.value.trim();
    if (t.priority.value) body.priority = Number(t.priority.value);
    const role = await guarded(t.button, t.error, () => this.app.api.post("/api/roles/from-template", body));
    if (!role) return;
    t.status.textContent = `Created the role ${role.name} (priority ${role.priority}).`;
    t.name.value = "";
    t.priority.value = "";
    await this.reloadRoles().catch((error) => (t.error.textContent = reason(error)));
  }

  edit(role) {
    this.editing = role;
    const f = this.roleFields("New ");
    f.button = h("button", { type: "submit", class: "primary", text: "Save role" });
    f.cancel = h("button", { type: "button", text: "Cancel", on: { click: () => this.closeEdit() } });
    f.status = statusLine();
    f.error = errorLine();
    f.name.value = role.name;
    f.priority.value = String(role.priority);
    f.description.value = role.description || "";
    this.renderPermissionBoxes(f.perms, new Set(role.permissions));
    this.editForm = f;
    this.editBox.hidden = false;
    const heading = h("h2", { id: "console-edit-role-heading", tabindex: "-1" }, "Edit the role ", h("bdi", { text: role.name }));
    fill(
      this.editBox,
      heading,
      h(
        "form",
        { class: "console-form", "aria-labelledby": "console-edit-role-heading", on: { submit: (e) => this.saveEdit(e) } },
        f.nodes,
        h("div", { class: "row" }, f.button, f.cancel),
        f.status,
        f.error,
      ),
    );
    heading.focus();
  }

  closeEdit() {
    this.editing = null;
    this.editBox.hidden = true;
    this.editBox.replaceChildren();
  }

  async saveEdit(event) {
    event.preventDefault();
    const f = this.editForm;
    const role = this.editing;
    f.status.textContent = "";
    const body = {};
    const name = f.name.value.trim();
    if (name !== role.name) body.name = name;
    const priority = Number(f.priority.value);
    if (priority !== role.priority) body.priority = priority;
    if (f.description.value.trim() !== (role.description || "")) body.description = f.description.value.trim();
    const perms = this.checked(f.perms);
    const before = [...role.permissions].sort().join(" ");
    if ([...perms].sort().join(" ") !== before) body.permissions = perms;
    if (!Object.keys(body).length) {
      f.status.textContent = "Nothing to save: no field was changed.";
      return;
    }
    const saved = await guarded(f.button, f.error, () => this.app.api.put(`/api/roles/${seg(role.roleId)}`, body));
    if (!saved) return;
    this.closeEdit();
    this.rolesStatus.textContent = `Saved the role ${saved.name}.`;
    await this.reloadRoles().catch((error) => (this.rolesError.textContent = reason(error)));
  }

  // the catalog -----------------------------------------------------------------------

  renderCatalog() {
    fill(
      this.catalogBox,
      table(
        "Every permission the node knows",
        ["Permission", "Category", "What it allows", "Lowest built-in role"],
        this.catalog.map((p) => [h("code", { text: p.name }), p.category, p.description, `${p.defaultRole} (${p.defaultPriority})`]),
      ),
    );
  }
}
