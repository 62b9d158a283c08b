// The Vault view (#vault). Not built yet.

import { h } from "./dom.js";
import { Panel } from "./panels.js";

export class VaultPanel extends Panel {
  static get id() {
    return "vault";
  }

  get title() {
    return "Vault";
  }

  show(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
