// The Bots view (#bots). Not built yet.

import { h } from "./dom.js";
import { Panel } from "./panels.js";

export class BotsPanel extends Panel {
  static get id() {
    return "bots";
  }

  get title() {
    return "Bots";
  }

  show(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
