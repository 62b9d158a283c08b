// The Apps view (#apps). Not built yet.

import { h } from "./dom.js";
import { Panel } from "./panels.js";

export class AppsPanel extends Panel {
  static get id() {
    return "apps";
  }

  get title() {
    return "Apps";
  }

  show(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
