// The owner's console (#console, #console/<section>): the mesh's settings,
// setup checklist and statistics, roles, room rules, models, rate limits and
// uploads, and federation. Shown only to those whose role may run the node
// (the node refuses everyone else anyway: every call is authorized there).
//
// Each section is its own module exporting a class with
// `constructor(app)`, `render(body)` (body: an empty element), optional
// `hide()` and `onEvent(event)`.

import { fill, h } from "./dom.js";
import { Panel } from "./view.js";
import { FederationSection } from "./console-federation.js";
import { LimitsSection } from "./console-limits.js";
import { ModelsSection } from "./console-models.js";
import { RolesSection } from "./console-roles.js";
import { RulesSection } from "./console-rules.js";
import { SettingsSection } from "./console-settings.js";

/** id, link text, class, the permission that shows it */
const SECTIONS = [
  ["settings", "Mesh", SettingsSection, "admin.stats"],
  ["roles", "Roles", RolesSection, "participants.role"],
  ["rules", "Room rules", RulesSection, "rooms.permissions"],
  ["models", "Models", ModelsSection, "models.manage"],
  ["limits", "Limits and uploads", LimitsSection, "mesh.settings"],
  ["federation", "Federation", FederationSection, "federation.manage"],
];

export class ConsolePanel extends Panel {
  constructor(app) {
    super(app);
    this.sections = new Map(SECTIONS.map(([id, text, Kind, permission]) => [id, { text, permission, section: new Kind(app) }]));
    this.current = null;
  }

  visibleSections() {
    const { store } = this.app;
    return [...this.sections.entries()].filter(([, s]) => store.can(s.permission));
  }

  show(body, arg) {
    const visible = this.visibleSections();
    const chosen = visible.find(([id]) => id === arg) || visible[0];
    const nav = h(
      "nav",
      { class: "console-nav", "aria-label": "Console sections" },
      h(
        "ul",
        {},
        visible.map(([id, s]) =>
          h(
            "li",
            {},
            h("a", { href: `#console/${id}`, "aria-current": chosen && chosen[0] === id ? "page" : null, text: s.text }),
          ),
        ),
      ),
    );
    const content = h("div", { class: "console-section" });
    fill(body, nav, content);
    if (!chosen) return;
    this.current = chosen[1].section;
    this.current.render(content);
  }

  hide() {
    if (this.current && this.current.hide) this.current.hide();
    this.current = null;
  }

  dispose() {
    this.hide();
    for (const { section } of this.sections.values()) {
      if (section.hide) section.hide();
    }
  }

  onEvent(event) {
    for (const { section } of this.sections.values()) {
      if (section.onEvent) section.onEvent(event);
    }
  }
}
