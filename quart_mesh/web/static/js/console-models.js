// A section of the owner's console (console.js). Not built yet.

import { h } from "./dom.js";

export class ModelsSection {
  constructor(app) {
    this.app = app;
  }

  render(body) {
    body.append(h("p", { text: "Not built yet." }));
  }
}
