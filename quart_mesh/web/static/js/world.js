// The World view (#world). Not built yet.

import { h } from "./dom.js";
import { Panel } from "./panels.js";

export class WorldPanel extends Panel {
  static get id() {
    return "world";
  }

  get title() {
    return "World";
  }

  show(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
