// The Vault view (#vault): the participant's own encrypted entries (API keys
// and other secrets). Encryption and decryption happen here, in the page,
// with WebCrypto (js/vaultcrypto.js, format v2); the node stores and returns
// only the blob. The passphrase and the plain secret live in form fields and
// local variables for one action: they are never stored (no localStorage,
// no sessionStorage, no URL) and never sent to the node.

import { ago, h, fill } from "./dom.js";
import { Panel, errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { available, decrypt, encrypt, versionOf } from "./vaultcrypto.js";

const ENTRIES = "/api/vault/entries";

/** Empty every password field under *root* (after use, on hide). */
function forgetFields(root) {
  if (!root) return;
  for (const input of root.querySelectorAll("input[type=password]")) input.value = "";
}

export class VaultPanel extends Panel {
  constructor(app) {
    super(app);
    this.entries = [];
    this.focusAfter = null;
  }

  show(body) {
    const intro = h(
      "p",
      { class: "hint" },
      "Keep API keys and other secrets here. They are encrypted in this page with your passphrase " +
        "before they are sent: the node stores only the encrypted form and cannot read it. " +
        "Your passphrase is never stored or sent; if you forget it, the entry cannot be opened.",
    );
    body.append(intro);
    if (!available()) {
      body.append(
        h("p", {
          class: "error",
          role: "alert",
          text:
            "This browser offers no WebCrypto on this page: open it over HTTPS " +
            "(or on the node's own machine) to use the vault.",
        }),
      );
    }
    this.listStatus = statusLine();
    this.listError = errorLine();
    this.listArea = h("div", { class: "vault-list" });
    this.detail = h("section", { class: "vault-detail", "aria-labelledby": "vault-detail-title", hidden: true });
    body.append(
      h(
        "section",
        { "aria-labelledby": "vault-entries-title" },
        h("h2", { id: "vault-entries-title", text: "Your entries" }),
        this.listStatus,
        this.listError,
        this.listArea,
      ),
      this.detail,
      this.addForm(),
    );
    this.load();
  }

  hide() {
    // nothing of a secret outlives the view
    forgetFields(this.body);
    this.closeDetail(false);
  }

  onEvent() {}

  /** Fetch the entries again; *done* is what the status line says after. */
  async load(done = "") {
    this.listStatus.textContent = "Loading…";
    try {
      this.entries = await this.app.api.get(ENTRIES);
      this.listError.textContent = "";
    } catch (error) {
      this.listError.textContent = reason(error);
      this.entries = [];
    }
    if (!this.shown) return;
    this.listStatus.textContent = done;
    this.renderList();
  }

  renderList() {
    if (!this.entries.length) {
      fill(this.listArea, h("p", { class: "hint", text: "No entries yet. Add one below." }));
      return;
    }
    const rows = this.entries.map((entry) => {
      const version = versionOf(entry.blob);
      const format = version === "v2" ? "v2" : version === "v1" ? "v1 (old)" : "unknown";
      const actions = h(
        "div",
        { class: "row" },
        h("button", {
          type: "button",
          class: "small",
          text: "Show",
          "aria-label": `Show ${entry.label}`,
          dataset: { entry: entry.entryId, action: "show" },
          on: { click: () => this.openShow(entry) },
        }),
        h("button", {
          type: "button",
          class: "small danger",
          text: "Delete",
          "aria-label": `Delete ${entry.label}`,
          dataset: { entry: entry.entryId, action: "delete" },
          on: { click: () => this.openDelete(entry) },
        }),
      );
      return [
        h("bdi", { text: entry.label }),
        entry.provider ? h("bdi", { text: entry.provider }) : "—",
        format,
        h("time", { datetime: entry.createdAt, title: entry.createdAt, text: ago(entry.createdAt) }),
        actions,
      ];
    });
    const count = this.entries.length;
    fill(
      this.listArea,
      table(`${count} ${count === 1 ? "entry" : "entries"}`, ["Label", "Provider", "Format", "Added", "Actions"], rows),
    );
    if (this.focusAfter) {
      const wanted = this.listArea.querySelector(
        `button[data-entry="${CSS.escape(this.focusAfter)}"][data-action="show"]`,
      );
      if (wanted) wanted.focus();
      this.focusAfter = null;
    }
  }

  /** Close the entry's pane (forgetting any passphrase and shown secret). */
  closeDetail(focusList = true) {
    if (!this.detail) return;
    forgetFields(this.detail);
    const entryId = this.detail.dataset.entry;
    this.detail.replaceChildren();
    this.detail.hidden = true;
    delete this.detail.dataset.entry;
    if (focusList && entryId) {
      const button = this.listArea.querySelector(`button[data-entry="${CSS.escape(entryId)}"]`);
      if (button) button.focus();
    }
  }

  openShow(entry) {
    this.closeDetail(false);
    this.detail.dataset.entry = entry.entryId;
    const heading = h("h2", { id: "vault-detail-title", tabindex: "-1" }, "Open ", h("bdi", { text: entry.label }));
    const error = errorLine();
    const status = statusLine();
    const cancel = h("button", { type: "button", text: "Close", on: { click: () => this.closeDetail() } });
    if (versionOf(entry.blob) !== "v2") {
      const old = versionOf(entry.blob) === "v1";
      fill(
        this.detail,
        heading,
        h("p", {
          class: "notice",
          role: "status",
          text: old
            ? "This entry is in the old format (v1, scrypt), which a browser cannot open. Open it with the " +
              "Python vault client (quart_mesh.vault_client, see the vault documentation), or delete it and " +
              "save the secret again here: it is then stored in the new format (v2)."
            : "This entry is not in a format this page knows: it was written by another client.",
        }),
        h("div", { class: "row" }, cancel),
      );
      this.detail.hidden = false;
      heading.focus();
      return;
    }
    const passphrase = h("input", {
      type: "password",
      autocomplete: "current-password",
      required: true,
      spellcheck: "false",
    });
    const secretOut = h("div", { class: "vault-secret", hidden: true });
    const submit = h("button", { type: "submit", class: "primary", text: "Decrypt" });
    const form = h(
      "form",
      {
        class: "vault-open",
        on: {
          submit: async (event) => {
            event.preventDefault();
            const phrase = passphrase.value;
            passphrase.value = ""; // cleared after use, whatever the outcome
            status.textContent = "Decrypting…";
            const secret = await guarded(submit, error, () => decrypt(entry.blob, phrase, entry.label));
            status.textContent = "";
            if (secret === undefined) {
              passphrase.focus();
              return;
            }
            this.revealSecret(secretOut, entry, secret);
            form.hidden = true;
          },
        },
      },
      field(`Passphrase for ${entry.label}`, passphrase, "Used in this page only, then forgotten."),
      h("div", { class: "row" }, submit, cancel),
    );
    fill(this.detail, heading, form, status, error, secretOut);
    this.detail.hidden = false;
    passphrase.focus();
  }

  revealSecret(out, entry, secret) {
    const code = h("input", {
      type: "text",
      readonly: true,
      class: "vault-plain",
      autocomplete: "off",
      spellcheck: "false",
      value: secret,
    });
    const copy = h("button", {
      type: "button",
      text: "Copy",
      "aria-label": `Copy the secret of ${entry.label}`,
      on: {
        click: async () => {
          try {
            if (!navigator.clipboard) throw new Error("no clipboard");
            await navigator.clipboard.writeText(code.value);
            note.textContent = "Copied.";
          } catch {
            note.textContent = "This browser does not let the page copy: select the text and copy it.";
          }
        },
      },
    });
    const note = statusLine();
    const hideButton = h("button", {
      type: "button",
      text: "Hide",
      "aria-label": `Hide the secret of ${entry.label}`,
      on: { click: () => this.closeDetail() },
    });
    fill(
      out,
      field(`Secret of ${entry.label}`, code, "Shown in this page only; Hide forgets it."),
      h("div", { class: "row" }, copy, hideButton),
      note,
    );
    out.hidden = false;
    hideButton.focus();
  }

  openDelete(entry) {
    this.closeDetail(false);
    this.detail.dataset.entry = entry.entryId;
    const heading = h("h2", { id: "vault-detail-title", tabindex: "-1" }, "Delete ", h("bdi", { text: entry.label }));
    const error = errorLine();
    const confirm = h("button", {
      type: "button",
      class: "danger",
      text: "Delete for good",
      on: {
        click: async () => {
          const path = `${ENTRIES}/${encodeURIComponent(entry.entryId)}`;
          const done = await guarded(confirm, error, () => this.app.api.delete(path));
          if (done === undefined) return;
          this.closeDetail(false);
          await this.load(`Deleted ${entry.label}.`);
        },
      },
    });
    const keep = h("button", { type: "button", text: "Keep it", on: { click: () => this.closeDetail() } });
    fill(
      this.detail,
      heading,
      h("p", { text: "The encrypted entry is removed from the node. This cannot be undone." }),
      h("div", { class: "row" }, confirm, keep),
      error,
    );
    this.detail.hidden = false;
    heading.focus();
  }

  addForm() {
    const label = h("input", { type: "text", maxlength: "100", required: true, autocomplete: "off" });
    const provider = h("input", { type: "text", maxlength: "64", autocomplete: "off", placeholder: "openai" });
    const secret = h("input", { type: "password", autocomplete: "off", required: true, spellcheck: "false" });
    const passphrase = h("input", { type: "password", autocomplete: "new-password", required: true, minlength: "8" });
    const again = h("input", { type: "password", autocomplete: "new-password", required: true });
    const error = errorLine();
    const status = statusLine();
    const submit = h("button", { type: "submit", class: "primary", text: "Encrypt and save" });
    const form = h(
      "form",
      {
        class: "vault-add",
        on: {
          submit: async (event) => {
            event.preventDefault();
            const phrase = passphrase.value;
            const repeated = again.value;
            const plain = secret.value;
            // the passphrases are forgotten at once, whatever happens next
            passphrase.value = "";
            again.value = "";
            if (phrase !== repeated) {
              error.textContent = "The two passphrases differ: enter them again.";
              passphrase.focus();
              return;
            }
            const name = label.value;
            status.textContent = "Encrypting…";
            const saved = await guarded(submit, error, async () => {
              const blob = await encrypt(plain, phrase, name);
              const body = { label: name, blob };
              if (provider.value.trim()) body.provider = provider.value.trim();
              return this.app.api.post(ENTRIES, body);
            });
            if (saved === undefined) {
              status.textContent = "";
              return;
            }
            secret.value = "";
            label.value = "";
            provider.value = "";
            status.textContent = `Saved ${saved.label}, encrypted.`;
            this.focusAfter = saved.entryId;
            await this.load();
          },
        },
      },
      field("Label", label, "A name for the entry, such as openai-main. The entry opens only under this label."),
      field("Provider (optional)", provider),
      field("Secret", secret, "The API key or other secret. It is encrypted here, before it is sent."),
      field("Passphrase", passphrase, "At least 8 characters; a long sentence is best. Never stored or sent."),
      field("Repeat the passphrase", again),
      h("div", { class: "row" }, submit),
      status,
      error,
    );
    return h(
      "section",
      { "aria-labelledby": "vault-add-title" },
      h("h2", { id: "vault-add-title", text: "Add an entry" }),
      form,
    );
  }
}
