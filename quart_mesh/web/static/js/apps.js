// The Apps view (#apps): the node's app store (deployed apps, each run in a
// sandboxed frame), the person's own apps with a source editor, versions,
// deployment, and generating an app from a prompt (docs/apps.md).
//
// Addresses: `#apps` (the store, my apps, generate), `#apps/new` (a new
// app), `#apps/<appId>` (its editor), `#apps/run/<appId>` (running it).
//
// Safety (decision 0050): an app runs only from the node's own
// `/api/apps/<id>/run` page, which the node serves with a CSP `sandbox`
// (an opaque origin, no network), in an `<iframe sandbox="allow-scripts">`
// (never allow-same-origin): its script cannot reach this page, its storage
// (the token) or the node's API. An undeployed app is not run here: its
// preview needs the owner's Authorization header, which a frame cannot
// send, and a page made from fetched text (srcdoc, blob:) would carry this
// page's CSP. The editor shows its source; deploying runs it.

import { seg } from "./api.js";
import { confirmAction } from "./dialogs.js";
import { ago, bdi, fill, formatBytes, h, longTime, toast } from "./dom.js";
import { Panel, errorLine, field, guarded, reason, statusLine, table } from "./view.js";

/** The frame's sandbox: scripts only (no same-origin, forms, popups, top navigation). */
const SANDBOX = "allow-scripts";

/** A records table that keeps its columns readable (it scrolls in its box on a phone). */
const wide = (wrap) => {
  wrap.classList.add("apps-table");
  return wrap;
};

/** Where an app runs (always this node's origin, whatever MESH_PUBLIC_URL says). */
const runPath = (appId) => `/api/apps/${seg(appId)}/run`;

export class AppsPanel extends Panel {
  constructor(app) {
    super(app);
    /** the generation under way: {controller, started, prompt, model} or null */
    this.generating = null;
    this.timer = null;
    /** elements of the generate form while shown */
    this.gen = null;
    /** no model is configured on the node */
    this.noModels = false;
    /** a line for the next editor shown ("Created.") */
    this.notice = "";
    /** a new object each time the view is shown (see stale()) */
    this.shownAs = null;
    /** what show() last drew, so a finished generation can redraw the list */
    this.arg = "";
  }

  show(body, arg) {
    this.arg = arg || "";
    // the view's element is the same for every address: a load that ends
    // after another address was shown must not draw over it
    this.shownAs = {};
    const run = /^run\/(.+)$/.exec(this.arg);
    if (run) return this.showRun(body, run[1]);
    if (this.arg === "new") return this.showEditor(body, null);
    if (this.arg) return this.showEditor(body, this.arg);
    return this.showList(body);
  }

  hide() {
    this.shownAs = null;
    this.gen = null;
    if (this.timer !== null && !this.generating) this.stopTimer();
  }

  /** A function telling whether the view was shown again (or left) since. */
  stale() {
    const as = this.shownAs;
    return () => this.shownAs !== as || !this.shown;
  }

  go(address) {
    location.hash = address ? `#apps/${address}` : "#apps";
  }

  // the list: the store, my apps, generate -------------------------------------

  async showList(body) {
    const stale = this.stale();
    const { store } = this.app;
    const storeSection = h("section", { "aria-labelledby": "apps-store-title" },
      h("h2", { id: "apps-store-title", text: "App store" }),
      h("p", { class: "hint", role: "status", text: "Loading the app store…" }));
    const mineSection = h("section", { "aria-labelledby": "apps-mine-title" },
      h("h2", { id: "apps-mine-title", text: "My apps" }),
      h("p", { class: "hint", role: "status", text: "Loading your apps…" }));
    // generating goes through the model proxy as the person: both rights
    const mayGenerate = store.can("apps.create") && store.can("models.use");
    fill(body, storeSection, mineSection, mayGenerate ? this.generateSection() : null);

    const [deployed, mine] = await Promise.allSettled([
      this.app.api.get("/api/apps/deployed"),
      this.app.api.get("/api/apps"),
    ]);
    if (stale()) return;
    const manageable = new Set(mine.status === "fulfilled" ? mine.value.map((a) => a.appId) : []);
    this.drawStore(storeSection, deployed, manageable);
    this.drawMine(mineSection, mine);
  }

  drawStore(section, result, manageable) {
    const heading = section.firstChild;
    if (result.status === "rejected") {
      fill(section, heading, h("p", { class: "error", role: "alert", text: `The app store could not be loaded: ${reason(result.reason)}` }));
      return;
    }
    const apps = result.value;
    if (!apps.length) {
      fill(section, heading, h("p", { class: "hint", text: "No app is deployed yet." }));
      return;
    }
    // a list of cards: every app's Run button in view, on a phone too
    const count = `${apps.length} deployed ${apps.length === 1 ? "app" : "apps"}`;
    const cards = apps.map((a) => h("li", { class: "app-card" },
      h("h3", {}, bdi(a.name, "app-name")),
      a.description ? h("p", { class: "app-description" }, bdi(a.description)) : null,
      h("p", { class: "hint" }, "by ", bdi(a.author || ""), " · updated ",
        h("time", { datetime: a.updatedAt, title: longTime(a.updatedAt), text: ago(a.updatedAt) })),
      h("div", { class: "row" },
        h("button", { type: "button", class: "small primary", "aria-label": `Run ${a.name}`, text: "Run", on: { click: () => this.go(`run/${a.appId}`) } }),
        manageable.has(a.appId)
          ? h("button", { type: "button", class: "small", "aria-label": `Edit ${a.name}`, text: "Edit", on: { click: () => this.go(a.appId) } })
          : null)));
    fill(section, heading, h("p", { id: "apps-store-count", class: "hint", text: count }),
      h("ul", { class: "app-cards", "aria-labelledby": "apps-store-count" }, cards));
  }

  drawMine(section, result) {
    const heading = section.firstChild;
    const { store } = this.app;
    const newButton = store.can("apps.create")
      ? h("button", { type: "button", class: "primary", text: "New app", on: { click: () => this.go("new") } })
      : null;
    if (result.status === "rejected") {
      fill(section, heading, h("p", { class: "error", role: "alert", text: `Your apps could not be loaded: ${reason(result.reason)}` }), newButton);
      return;
    }
    const apps = result.value;
    const admin = apps.some((a) => a.ownerId !== store.me.participantId);
    if (!apps.length) {
      fill(section, heading, h("p", { class: "hint", text: store.can("apps.create") ? "You have no app yet: write one or generate one from a prompt." : "You have no app." }), h("div", { class: "row apps-actions" }, newButton));
      return;
    }
    const headings = ["Name", ...(admin ? ["Owner"] : []), "Version", "State", "Updated", "Actions"];
    const rows = apps.map((a) => [
      bdi(a.name, "app-name"),
      ...(admin ? [bdi(a.ownerName || "")] : []),
      String(a.version),
      a.deployed ? h("span", { class: "app-state deployed", text: "Deployed" }) : h("span", { class: "app-state", text: "Draft" }),
      h("time", { datetime: a.updatedAt, title: longTime(a.updatedAt), text: ago(a.updatedAt) }),
      h("div", { class: "row" },
        h("button", { type: "button", class: "small", "aria-label": `Edit ${a.name}`, text: "Edit", on: { click: () => this.go(a.appId) } }),
        a.deployed
          ? h("button", { type: "button", class: "small", "aria-label": `Run ${a.name}`, text: "Run", on: { click: () => this.go(`run/${a.appId}`) } })
          : null),
    ]);
    const caption = admin ? "Every app on this node (you may manage them)" : `Your ${apps.length} ${apps.length === 1 ? "app" : "apps"}`;
    fill(section, heading, wide(table(caption, headings, rows)), h("div", { class: "row apps-actions" }, newButton));
  }

  // generating from a prompt ---------------------------------------------------------

  generateSection() {
    const prompt = h("textarea", { rows: "3", maxlength: "8000", required: true });
    const model = h("select", {}, h("option", { value: "", text: "Loading models…" }));
    const name = h("input", { type: "text", maxlength: "100", autocomplete: "off" });
    const button = h("button", { type: "submit", class: "primary", text: "Generate" });
    const cancel = h("button", { type: "button", text: "Cancel", hidden: true, on: { click: () => this.cancelGeneration() } });
    const status = statusLine();
    const error = errorLine();
    const form = h("form", { class: "apps-generate", novalidate: true, "aria-labelledby": "apps-generate-title", on: { submit: (e) => { e.preventDefault(); this.generate(); } } },
      field("Describe the app", prompt, "A model writes the HTML, CSS and JavaScript; the app is saved as a draft for you to check and deploy."),
      h("div", { class: "apps-generate-row" },
        field("Model", model),
        field("Name (optional)", name)),
      h("div", { class: "row" }, button, cancel),
      status, error);
    this.gen = { prompt, model, name, button, cancel, status, error };
    this.loadModels(model);
    this.renderGenerating();
    return h("section", { "aria-labelledby": "apps-generate-title" },
      h("h2", { id: "apps-generate-title", text: "Generate from a prompt" }), form);
  }

  async loadModels(select) {
    let models;
    try {
      models = await this.app.api.get("/api/models");
    } catch (error) {
      fill(select, h("option", { value: "", text: "The node's default model" }));
      if (this.gen && this.gen.model === select) this.gen.error.textContent = `The models could not be listed: ${reason(error)}`;
      return;
    }
    this.noModels = !models.length;
    if (this.noModels) {
      fill(select, h("option", { value: "", text: "No model is configured" }));
      if (this.gen && this.gen.model === select) {
        this.gen.status.textContent = "No model is configured on this node: an admin adds one in the console.";
        this.renderGenerating();
      }
      return;
    }
    const chosen = this.generating ? this.generating.model : "";
    fill(select, h("option", { value: "", text: "The node's default model" }),
      models.map((m) => h("option", { value: m.name, text: m.name, selected: m.name === chosen })));
  }

  async generate() {
    const g = this.gen;
    if (!g || this.generating) return;
    const prompt = g.prompt.value.trim();
    if (!prompt) {
      g.error.textContent = "Describe the app you want.";
      g.prompt.setAttribute("aria-invalid", "true");
      g.prompt.focus();
      return;
    }
    g.prompt.removeAttribute("aria-invalid");
    g.error.textContent = "";
    const body = { prompt };
    if (g.model.value) body.model = g.model.value;
    if (g.name.value.trim()) body.name = g.name.value.trim();
    const controller = new AbortController();
    this.generating = { controller, started: Date.now(), prompt, model: g.model.value, name: g.name.value };
    this.renderGenerating();
    this.timer = setInterval(() => this.renderGenerating(), 1000);
    let made = null;
    let failure = null;
    try {
      made = await this.app.api.post("/api/apps/generate", body, { signal: controller.signal });
    } catch (error) {
      failure = error;
    }
    const seconds = Math.round((Date.now() - this.generating.started) / 1000);
    this.generating = null;
    this.stopTimer();
    if (this.disposed) return; // signed out meanwhile: nobody to tell
    this.renderGenerating();
    const gen = this.gen;
    if (made) {
      if (gen) {
        gen.prompt.value = "";
        gen.name.value = "";
      }
      if (this.shown && this.arg === "") {
        this.notice = `Generated in ${seconds} s as a draft: check it, then deploy it.`;
        this.go(made.appId);
      } else {
        toast(`“${made.name}” was generated in ${seconds} s.`);
      }
      return;
    }
    const message = failure.name === "AbortError" ? "Generation cancelled." : `Generation failed: ${reason(failure)}`;
    if (gen) {
      if (failure.name === "AbortError") gen.status.textContent = message;
      else gen.error.textContent = message;
    } else {
      toast(message);
    }
  }

  /** Signing out: a generation under way is cancelled, and says nothing. */
  dispose() {
    this.disposed = true;
    this.cancelGeneration();
    this.stopTimer();
    this.hide();
  }

  cancelGeneration() {
    if (this.generating) this.generating.controller.abort();
  }

  stopTimer() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** The generate form as the generation under way says (or an idle form). */
  renderGenerating() {
    const g = this.gen;
    if (!g) return;
    const busy = this.generating;
    g.button.disabled = Boolean(busy) || this.noModels;
    g.cancel.hidden = !busy;
    g.prompt.readOnly = Boolean(busy);
    g.name.readOnly = Boolean(busy);
    g.model.disabled = Boolean(busy) || this.noModels;
    if (busy) {
      if (!g.prompt.value) g.prompt.value = busy.prompt;
      if (!g.name.value) g.name.value = busy.name;
      const seconds = Math.floor((Date.now() - busy.started) / 1000);
      g.status.textContent = `Generating… ${seconds} s`;
    } else if (g.status.textContent.startsWith("Generating")) {
      g.status.textContent = "";
    }
    g.button.setAttribute("aria-busy", busy ? "true" : "false");
  }

  // running an app ------------------------------------------------------------------

  async showRun(body, appId) {
    const stale = this.stale();
    const status = h("p", { class: "hint", role: "status", text: "Loading the app…" });
    fill(body, h("p", {}, h("a", { href: "#apps", text: "← All apps" })), status);
    let info;
    try {
      info = await this.app.api.get(`/api/apps/${seg(appId)}`);
    } catch (error) {
      if (stale()) return;
      fill(body, h("p", {}, h("a", { href: "#apps", text: "← All apps" })), h("p", { class: "error", role: "alert", text: `This app cannot be shown: ${reason(error)}` }));
      return;
    }
    if (stale()) return;
    const back = h("p", {}, h("a", { href: "#apps", text: "← All apps" }));
    if (!info.deployed) {
      fill(body, back, h("section", { "aria-labelledby": "apps-run-title" },
        h("h2", { id: "apps-run-title" }, bdi(info.name)),
        h("p", { class: "notice", text: "This app is a draft: deploy it to run it here (a draft is never run in this page; see its source in the editor)." }),
        h("button", { type: "button", text: "Open the editor", on: { click: () => this.go(info.appId) } })));
      return;
    }
    const frame = h("iframe", {
      class: "app-frame",
      src: runPath(info.appId),
      sandbox: SANDBOX,
      title: `App: ${info.name}`,
      referrerpolicy: "no-referrer",
      loading: "eager",
    });
    const canEdit = this.app.store.can("apps.create") && (info.ownerId === this.app.store.me.participantId || this.app.store.can("apps.manage"));
    fill(body, back, h("section", { class: "app-run", "aria-labelledby": "apps-run-title" },
      h("div", { class: "app-run-head" },
        h("div", {},
          h("h2", { id: "apps-run-title" }, bdi(info.name)),
          h("p", { class: "hint" }, info.description ? bdi(info.description) : null, info.description ? " · " : null, "by ", bdi(info.ownerName || ""), ` · version ${info.version}`)),
        h("div", { class: "row" },
          h("button", { type: "button", text: "Reload", on: { click: () => { frame.src = runPath(info.appId); } } }),
          h("a", { class: "button-link", href: runPath(info.appId), target: "_blank", rel: "noopener noreferrer", text: "Open in a new tab" }),
          canEdit ? h("button", { type: "button", text: "Edit", on: { click: () => this.go(info.appId) } }) : null)),
      h("p", { class: "hint", text: "The app runs sandboxed: it cannot see this page, your account or the network." }),
      frame));
  }

  // the editor ----------------------------------------------------------------------

  async showEditor(body, appId) {
    const stale = this.stale();
    const { store } = this.app;
    const back = h("p", {}, h("a", { href: "#apps", text: "← All apps" }));
    let info = null;
    if (appId) {
      fill(body, back, h("p", { class: "hint", role: "status", text: "Loading the app…" }));
      try {
        info = await this.app.api.get(`/api/apps/${seg(appId)}`);
      } catch (error) {
        if (stale()) return;
        fill(body, back, h("p", { class: "error", role: "alert", text: `This app cannot be opened: ${reason(error)}` }));
        return;
      }
      if (stale()) return;
    } else if (!store.can("apps.create")) {
      fill(body, back, h("p", { class: "error", role: "alert", text: "Your role may not create apps." }));
      return;
    }
    const mayManage = Boolean(info) && (info.ownerId === store.me.participantId || store.can("apps.manage"));
    const mayEdit = store.can("apps.create") && (!info || mayManage);
    const mayDeploy = Boolean(info) && mayManage && store.can("apps.deploy");

    const name = h("input", { type: "text", maxlength: "100", autocomplete: "off", required: true, value: info ? info.name : "" });
    const description = h("input", { type: "text", autocomplete: "off", value: info ? info.description || "" : "" });
    const code = (value, label) => h("textarea", { class: "code", rows: "10", spellcheck: "false", autocapitalize: "off", autocomplete: "off", readonly: !mayEdit, value, "aria-label": label });
    const html = code(info ? info.html : "<h1>Hello</h1>\n", "HTML");
    const css = code(info ? info.css : "", "CSS");
    const js = code(info ? info.js : "", "JavaScript");
    const status = statusLine();
    const error = errorLine();
    const summary = h("p", { class: "hint app-summary" });
    const versions = h("section", { "aria-labelledby": "apps-versions-title" }, h("h2", { id: "apps-versions-title", text: "Versions" }));

    const codeField = (text, el) => {
      el.removeAttribute("aria-label");
      return field(text, el);
    };
    const buttons = h("div", { class: "row" });
    const form = h("form", { class: "app-editor", novalidate: true, "aria-labelledby": "apps-editor-title", on: { submit: (e) => { e.preventDefault(); save(); } } },
      info
        ? h("div", { class: "app-meta" }, h("p", {}, "Name: ", bdi(info.name, "app-name")), info.description ? h("p", {}, "Description: ", bdi(info.description)) : null)
        : [field("Name", name), field("Description (optional)", description)],
      h("div", { class: "app-code" }, codeField("HTML", html), codeField("CSS", css), codeField("JavaScript", js)),
      buttons, status, error);

    const describe = () => {
      if (!info) {
        fill(summary, "A new app: it is saved as a draft (version 1); deploy it to put it in the app store.");
        return;
      }
      fill(summary, `Version ${info.version} · ${info.deployed ? "deployed in the app store" : "draft (not deployed)"} · by `, bdi(info.ownerName || ""), ` · saved ${ago(info.updatedAt)}`);
    };

    const save = async () => {
      if (!mayEdit) return;
      if (!info) {
        if (!name.value.trim()) {
          error.textContent = "Give the app a name.";
          name.setAttribute("aria-invalid", "true");
          name.focus();
          return;
        }
        name.removeAttribute("aria-invalid");
        const made = await guarded(saveButton, error, () => this.app.api.post("/api/apps", {
          name: name.value.trim(), description: description.value.trim(), html: html.value, css: css.value, js: js.value,
        }));
        if (made) {
          this.notice = "Created as a draft (version 1).";
          this.go(made.appId);
        }
        return;
      }
      status.textContent = "Saving…";
      const saved = await guarded(saveButton, error, () => this.app.api.put(`/api/apps/${seg(info.appId)}/source`, { html: html.value, css: css.value, js: js.value }));
      status.textContent = saved ? `Saved as version ${saved.version}.` : "";
      if (saved) {
        info = saved;
        describe();
        drawButtons();
        this.drawVersions(versions, info, load);
      }
    };

    const deploy = async (on) => {
      status.textContent = on ? "Deploying…" : "Taking it down…";
      const done = await guarded(null, error, () => this.app.api.post(`/api/apps/${seg(info.appId)}/${on ? "deploy" : "undeploy"}`));
      status.textContent = done ? (on ? "Deployed: it is in the app store." : "Undeployed: it is a draft again.") : "";
      if (done) {
        info = { ...info, ...done };
        describe();
        drawButtons();
      }
    };

    const remove = async () => {
      const sure = await confirmAction("Delete this app?", `“${info.name}” and all its versions will be deleted${info.deployed ? " and taken out of the app store" : ""}. This cannot be undone.`, "Delete app");
      if (!sure) return;
      const done = await guarded(null, error, () => this.app.api.delete(`/api/apps/${seg(info.appId)}`));
      if (done) {
        toast(`“${info.name}” was deleted.`);
        this.go("");
      }
    };

    const load = (source) => {
      html.value = source.html;
      css.value = source.css;
      js.value = source.js;
      status.textContent = `Version ${source.version} loaded into the editor: save to make it the current version.`;
      html.focus();
    };

    const saveButton = h("button", { type: "submit", class: "primary", text: info ? "Save" : "Create" });
    const drawButtons = () => {
      const parts = [];
      if (mayEdit) parts.push(saveButton);
      if (info && mayDeploy) {
        parts.push(info.deployed
          ? h("button", { type: "button", text: "Undeploy", on: { click: () => deploy(false) } })
          : h("button", { type: "button", text: "Deploy", on: { click: () => deploy(true) } }));
      }
      if (info && info.deployed) parts.push(h("button", { type: "button", text: "Run", on: { click: () => this.go(`run/${info.appId}`) } }));
      if (info && mayManage) parts.push(h("button", { type: "button", class: "danger", text: "Delete", on: { click: remove } }));
      fill(buttons, parts);
    };

    describe();
    drawButtons();
    const editorTitle = info ? `Edit “${info.name}”` : "New app";
    fill(body, back,
      h("section", { "aria-labelledby": "apps-editor-title" },
        h("h2", { id: "apps-editor-title", text: editorTitle }),
        summary,
        !mayEdit ? h("p", { class: "notice", text: "You may read this app's source but not change it." }) : null,
        form),
      info && mayManage ? versions : null);
    if (info && mayManage) this.drawVersions(versions, info, load);
    if (!info) name.focus();
    status.textContent = this.notice;
    this.notice = "";
  }

  async drawVersions(section, info, load) {
    const heading = section.firstChild;
    let list;
    try {
      list = await this.app.api.get(`/api/apps/${seg(info.appId)}/versions`);
    } catch (error) {
      fill(section, heading, h("p", { class: "error", role: "alert", text: `The versions could not be listed: ${reason(error)}` }));
      return;
    }
    const rows = list.map((v) => [
      v.version === info.version ? `${v.version} (current)` : String(v.version),
      h("time", { datetime: v.createdAt, title: longTime(v.createdAt), text: ago(v.createdAt) }),
      formatBytes(v.size),
      v.version === info.version
        ? h("span", { class: "hint", text: "—" })
        : h("button", { type: "button", class: "small", "aria-label": `Load version ${v.version}`, text: "Load", on: { click: async (e) => {
            const source = await guarded(e.currentTarget, null, () => this.app.api.get(`/api/apps/${seg(info.appId)}/versions/${v.version}`)).catch((error) => {
              toast(`Version ${v.version} could not be loaded: ${reason(error)}`);
            });
            if (source) load(source);
          } } }),
    ]);
    fill(section, heading, table(`${list.length} saved ${list.length === 1 ? "version" : "versions"}, newest first`, ["Version", "Saved", "Size", "Actions"], rows));
  }
}
