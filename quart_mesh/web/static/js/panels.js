// The client's views beyond the chat ("panels": the world view, bots, apps,
// the vault, the model playground, the owner's console). Each is a Panel
// subclass in its own module, shown in the main area at its own address
// (`#world`, `#bots`, `#console/roles`…) by main.js. They speak only the
// public REST API and /ws, like the chat.

import { h } from "./dom.js";

/**
 * Every view beyond the chat, in the order of their links: its address
 * (`#id`), heading and link name, module and exported class, style sheets
 * (under /web/css/), and who is offered it: anyone (`null`) or those whose
 * role holds one of `anyOf` (the node refuses the rest anyway). A view's
 * module and styles are fetched the first time it is opened, so the chat
 * loads no code of views a person never opens.
 */
export const VIEWS = [
  { id: "world", title: "World", module: "./world.js", name: "WorldPanel", css: ["world.css"], anyOf: null },
  { id: "bots", title: "Bots", module: "./bots.js", name: "BotsPanel", css: ["bots.css"], anyOf: null },
  { id: "apps", title: "Apps", module: "./apps.js", name: "AppsPanel", css: ["apps.css"], anyOf: ["apps.read"] },
  { id: "vault", title: "Vault", module: "./vault.js", name: "VaultPanel", css: ["vault.css"], anyOf: ["vault.use"] },
  {
    id: "playground",
    title: "Models",
    module: "./playground.js",
    name: "PlaygroundPanel",
    css: ["playground.css"],
    anyOf: ["models.use"],
  },
  {
    id: "console",
    title: "Console",
    module: "./console.js",
    name: "ConsolePanel",
    css: ["console.css", "console-b.css"],
    anyOf: ["admin.stats", "mesh.settings"],
  },
];

/** Whether the signed-in participant is offered *view*. */
export function offered(view, store) {
  return view.anyOf === null || view.anyOf.some((permission) => store.can(permission));
}

/** Load a view's style sheets (once; with css/panels.css, what they share)
 * and module; resolves with its class. */
export async function loadView(view) {
  await Promise.all(["panels.css", ...view.css].map(loadStyle));
  const module = await import(view.module);
  return module[view.name];
}

const styles = new Map();
/** Load a style sheet of /web/css/ (once). */
export function loadStyle(file) {
  if (!styles.has(file)) {
    styles.set(
      file,
      new Promise((resolve, reject) => {
        const link = h("link", { rel: "stylesheet", href: `/web/css/${file}` });
        link.addEventListener("load", () => resolve());
        link.addEventListener("error", () => {
          styles.delete(file);
          link.remove();
          reject(new Error(`The style sheet ${file} could not be loaded.`));
        });
        document.head.append(link);
      }),
    );
  }
  return styles.get(file);
}
