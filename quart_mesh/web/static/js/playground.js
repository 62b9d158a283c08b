// The Models view (#playground). Not built yet.

import { h } from "./dom.js";
import { Panel } from "./panels.js";

export class PlaygroundPanel extends Panel {
  static get id() {
    return "playground";
  }

  get title() {
    return "Models";
  }

  show(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
