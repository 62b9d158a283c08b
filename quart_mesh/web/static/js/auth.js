// First run, sign in, register, guest (POST /api/setup/init, /api/auth/*).
// Fetched by main.js, with css/auth.css, when first shown: a signed-in visit
// never loads it.

import { $, h } from "./dom.js";

const PASSWORD_HINT = "At least 8 characters, not a common password.";

/** A label, its input and, with *hint*, the hint the input is described by. */
function entry(id, label, attrs, hint = null) {
  const described = hint ? `${id}-hint` : null;
  return [
    h("label", { for: id, text: label }),
    h("input", { id, required: true, ...attrs, "aria-describedby": described }),
    hint ? h("p", { id: described, class: "hint" }, hint) : null,
  ];
}

function choices(legend, name, options) {
  return h(
    "fieldset",
    {},
    h("legend", { text: legend }),
    options.map(([value, text], i) => h("label", {}, h("input", { type: "radio", name, value, checked: i === 0 }), ` ${text}`)),
  );
}

const name = { name: "name", autocomplete: "username", autocapitalize: "off", spellcheck: "false" };
const form = (id, submit, ...fields) =>
  h("form", { id, class: "stack", hidden: true, novalidate: true }, fields, h("p", { class: "error", role: "alert" }), h("button", { type: "submit", class: "primary", text: submit }));

/** The screen's markup, before the chat's. */
function build() {
  const newPassword = { name: "password", type: "password", autocomplete: "new-password", minlength: "8", maxlength: "256" };
  const screen = h(
    "main",
    { id: "auth", class: "auth", hidden: true, "aria-labelledby": "auth-title" },
    h(
      "div",
      { class: "auth-card" },
      h("p", { class: "auth-mesh", id: "auth-mesh" }),
      h("h1", { id: "auth-title", text: "Sign in" }),
      h("p", { id: "auth-notice", class: "notice", role: "status", hidden: true }),
      form(
        "setup-form",
        "Create mesh",
        h("p", { text: "This node has no mesh yet. Create it: you become its owner." }),
        entry("setup-name", "Your name", { ...name, maxlength: "64" }),
        entry("setup-password", "Password", newPassword, PASSWORD_HINT),
        entry("setup-mesh", "Mesh name", { name: "meshName", maxlength: "200" }),
        h(
          "div",
          { id: "setup-code-field", class: "stack", hidden: true },
          entry(
            "setup-code",
            "Setup code",
            { name: "setupCode", maxlength: "64", autocomplete: "off", autocapitalize: "characters", spellcheck: "false", disabled: true, required: false },
            "This node can be reached from the network, so it asks for the one-time code it wrote in its log when it started (a line with “setup code:”).",
          ),
        ),
        choices("Visibility", "visibility", [
          ["public", "Public: guests may look in"],
          ["private", "Private: members only"],
        ]),
        choices("Registration", "registrationMode", [
          ["open", "Open: anyone may register"],
          ["closed", "Closed: no new accounts"],
        ]),
      ),
      form(
        "signin-form",
        "Sign in",
        entry("signin-name", "Name", name),
        entry("signin-password", "Password", { name: "password", type: "password", autocomplete: "current-password" }),
      ),
      form(
        "register-form",
        "Create account",
        entry("register-name", "Choose a name", { ...name, maxlength: "64" }, [
          "Letters, digits, ",
          h("code", { text: "_" }),
          ", ",
          h("code", { text: "." }),
          " and ",
          h("code", { text: "-" }),
          "; no spaces.",
        ]),
        entry("register-password", "Choose a password", newPassword, PASSWORD_HINT),
      ),
      h(
        "div",
        { id: "auth-switch", class: "auth-switch", hidden: true },
        h("button", { type: "button", id: "show-signin", class: "link", text: "I have an account: sign in" }),
        h("button", { type: "button", id: "show-register", class: "link", text: "Create an account" }),
        h("p", {
          id: "registration-closed",
          class: "hint",
          hidden: true,
          text: "Registration is closed on this mesh: ask an administrator for an account.",
        }),
      ),
      h(
        "section",
        { id: "guest-section", class: "guest-section", hidden: true, "aria-labelledby": "guest-title" },
        h("h2", { id: "guest-title", text: "Just looking?" }),
        h("p", { text: "Guests can read and join rooms but cannot post, react or start conversations." }),
        h("p", { class: "error", role: "alert" }),
        h("button", { type: "button", id: "guest-button", text: "Continue as a guest" }),
      ),
    ),
  );
  $("chat").before(screen);
}

const FIELD_OF_CODE = {
  invalid_name: "name",
  name_taken: "name",
  weak_password: "password",
  invalid_password: "password",
  invalid_mesh_name: "meshName",
  invalid_credentials: "password",
  setup_code_required: "setupCode",
  invalid_setup_code: "setupCode",
};

export class AuthScreen {
  /**
   * @param {import("./api.js").Api} api
   * @param {(session: object) => void} signedIn
   */
  constructor(api, signedIn) {
    this.api = api;
    this.signedIn = signedIn;
    this.status = null;
    this.busy = false;
    build();
    $("setup-form").addEventListener("submit", (e) => this.submit(e, "setup"));
    $("signin-form").addEventListener("submit", (e) => this.submit(e, "signin"));
    $("register-form").addEventListener("submit", (e) => this.submit(e, "register"));
    $("show-register").addEventListener("click", () => this.mode("register"));
    $("show-signin").addEventListener("click", () => this.mode("signin"));
    $("guest-button").addEventListener("click", () => this.guest());
  }

  /** Show the right form for this node (`GET /api/setup/status`), with an
   * optional notice (why the person is here again). */
  show(status, notice = "") {
    this.status = status;
    $("auth").hidden = false;
    $("auth-mesh").textContent = status.meshName || "";
    const noticeEl = $("auth-notice");
    noticeEl.textContent = notice;
    noticeEl.hidden = !notice;
    document.title = status.meshName ? `Sign in · ${status.meshName}` : "Set up your mesh";
    // a node reachable from the network asks for the setup code it logged
    const code = Boolean(!status.initialized && status.codeRequired);
    $("setup-code-field").hidden = !code;
    $("setup-code").disabled = !code;
    $("setup-code").required = code;
    this.mode(status.initialized ? "signin" : "setup");
  }

  hide() {
    $("auth").hidden = true;
  }

  mode(which) {
    const status = this.status;
    const open = status.initialized && status.registrationMode === "open";
    const titles = { setup: "Set up your mesh", signin: "Sign in", register: "Create an account" };
    $("auth-title").textContent = titles[which];
    $("setup-form").hidden = which !== "setup";
    $("signin-form").hidden = which !== "signin";
    $("register-form").hidden = which !== "register";
    $("auth-switch").hidden = which === "setup";
    $("show-register").hidden = which !== "signin" || !open;
    $("show-signin").hidden = which !== "register";
    $("registration-closed").hidden = which !== "signin" || open || !status.initialized;
    $("guest-section").hidden = which === "setup" || status.visibility !== "public";
    for (const form of ["setup-form", "signin-form", "register-form"]) this.error($(form), "");
    const first = { setup: "setup-name", signin: "signin-name", register: "register-name" }[which];
    $(first).focus();
  }

  error(container, text) {
    const el = container.querySelector(".error");
    el.textContent = text;
    el.hidden = !text;
  }

  async submit(event, which) {
    event.preventDefault();
    if (this.busy) return;
    const form = event.currentTarget;
    const data = Object.fromEntries(new FormData(form).entries());
    const missing = [...form.querySelectorAll("[required]")].find((input) => !input.value.trim());
    if (missing) {
      const label = form.querySelector(`label[for="${missing.id}"]`);
      this.error(form, `${label ? label.textContent : "This field"} is required.`);
      missing.setAttribute("aria-invalid", "true");
      missing.focus();
      return;
    }
    for (const input of form.querySelectorAll("input")) input.removeAttribute("aria-invalid");
    const path = {
      setup: "/api/setup/init",
      signin: "/api/auth/login",
      register: "/api/auth/register",
    }[which];
    this.busy = true;
    form.querySelector("button[type=submit]").disabled = true;
    try {
      const session = await this.api.post(path, data);
      this.signedIn(session);
    } catch (error) {
      this.error(form, this.explain(error, which));
      const field = FIELD_OF_CODE[error.code];
      const input = field && form.querySelector(`[name="${field}"]:not([disabled])`);
      if (input) {
        input.setAttribute("aria-invalid", "true");
        input.focus();
      }
      const stale = ["already_initialized", "registration_closed"];
      if (stale.includes(error.code) || (error.code === "setup_code_required" && !input)) {
        this.refresh(this.explain(error, which));
      }
    } finally {
      this.busy = false;
      form.querySelector("button[type=submit]").disabled = false;
    }
  }

  explain(error, which) {
    if (error.code === "invalid_credentials") return "Wrong name or password.";
    if (error.code === "registration_closed") {
      return "Registration is closed on this mesh: ask an administrator for an account.";
    }
    if (error.code === "already_initialized") return "This mesh is already set up: sign in.";
    if (error.code === "setup_code_required") {
      return "This node asks for its setup code: it is in the node's log.";
    }
    if (error.code === "invalid_setup_code") {
      return "Wrong setup code: copy it from the node's log (the line with “setup code:”).";
    }
    if (error.code === "rate_limited") {
      return `Too many attempts. Try again in ${error.retryAfter || "a few"} seconds.`;
    }
    if (error.status === 0) return "The node cannot be reached. Try again in a moment.";
    return which === "setup" || which === "register" ? `${error.message}.` : error.message;
  }

  async guest() {
    const section = $("guest-section");
    try {
      const session = await this.api.post("/api/auth/guest", {});
      this.signedIn(session);
    } catch (error) {
      const text =
        error.code === "guests_not_allowed" ? "This mesh does not admit guests." : error.message;
      this.error(section, text);
    }
  }

  async refresh(notice) {
    try {
      this.show(await this.api.get("/api/setup/status"), notice);
    } catch {
      // keep what is shown
    }
  }
}
