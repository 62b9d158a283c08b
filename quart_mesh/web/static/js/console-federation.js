// The console's "Federation" section (#console/federation): this node's
// identity (its manifest), its connections with other nodes (GET
// /api/connections: request, accept, decline, withdraw, disconnect), the
// rooms shared over each (share, stop sharing, join the peer's), the relay
// link per peer, and the meshes that announce themselves to this node as a
// registry (GET /api/meshes/public). docs/federation.md.
//
// The node sends no live event about connections, so the section asks
// again when it is shown, after each action, and every POLL_MS while it is
// shown (not while the page is in the background). localStorage
// "mesh.consolePollMs" sets another period, not under MIN_POLL_MS (the
// browser tests use it so as not to wait seconds for each poll; docs/web.md).

import { ago, fill, h, longTime, shortDid } from "./dom.js";
import { confirmAction } from "./dialogs.js";
import { errorLine, field, guarded, reason, statusLine, table } from "./view.js";
import { seg } from "./api.js";

/** A table of many columns (panels.js's table() frames it for scrolling). */
const wide = (el) => {
  el.classList.add("console-b-wide");
  return el;
};

const POLL_MS = 5000;
const MIN_POLL_MS = 200;

/** The period between polls: POLL_MS, or the one set in localStorage. */
function pollMs() {
  let set = NaN;
  try {
    set = Number(localStorage.getItem("mesh.consolePollMs"));
  } catch {
    // storage refused (a sandbox): the default
  }
  return Number.isFinite(set) && set > 0 ? Math.max(MIN_POLL_MS, set) : POLL_MS;
}

const STATES = {
  pending: { outbound: "Waiting for their answer", inbound: "Asks to connect" },
  accepted: "Connected",
  declined: "Declined",
  disconnected: "Disconnected",
};

function stateText(connection) {
  const state = STATES[connection.status];
  if (state && typeof state === "object") return state[connection.direction] || connection.status;
  return state || connection.status;
}

/** A time as "5 minutes ago", with the full date as its title. */
function when(iso) {
  if (!iso) return h("span", { text: "never" });
  return h("time", { datetime: iso, title: longTime(iso), text: ago(iso) });
}

export class FederationSection {
  constructor(app) {
    this.app = app;
    this.body = null;
    this.timer = 0;
    this.loading = null;
    this.manifest = null;
    this.connections = [];
    this.rooms = [];
    this.meshes = [];
    /** false once the node answered that it is not a registry */
    this.isRegistry = null;
    this.drawn = new Map(); // box -> signature of what it shows
    this.onVisible = () => {
      if (this.body && !document.hidden) this.refresh();
    };
  }

  render(body) {
    this.hide(); // shown again without being left: one timer only
    this.body = body;
    this.drawn.clear();
    this.identityBox = h("div", {}, h("p", { class: "hint", text: "Loading…" }));
    this.connectionsBox = h("div", {}, h("p", { class: "hint", text: "Loading connections…" }));
    this.connectionsStatus = statusLine();
    this.connectionsError = errorLine();
    this.sharesBox = h("div", {});
    this.sharesStatus = statusLine();
    this.sharesError = errorLine();
    this.relayBox = h("div", {});
    this.registryBox = h("div", {}, h("p", { class: "hint", text: "Loading…" }));
    this.registryError = errorLine();
    fill(
      body,
      h(
        "div",
        { class: "console-b-pair" },
        h(
          "section",
          { "aria-labelledby": "console-node-heading" },
          h("h2", { id: "console-node-heading", text: "This node" }),
          this.identityBox,
        ),
        this.requestPart(),
      ),
      h(
        "section",
        { "aria-labelledby": "console-connections-heading" },
        h("h2", { id: "console-connections-heading", text: "Connections" }),
        this.connectionsBox,
        this.connectionsStatus,
        this.connectionsError,
      ),
      h(
        "section",
        { "aria-labelledby": "console-shares-heading" },
        h("h2", { id: "console-shares-heading", text: "Shared rooms" }),
        this.sharesBox,
        this.sharesStatus,
        this.sharesError,
      ),
      h(
        "section",
        { "aria-labelledby": "console-relay-heading" },
        h("h2", { id: "console-relay-heading", text: "Relay" }),
        h("p", {
          class: "hint",
          text: "Each connected peer has one link that sends it the changes of shared rooms, in order, and tries again while the peer cannot be reached.",
        }),
        this.relayBox,
      ),
      h(
        "section",
        { "aria-labelledby": "console-registry-heading" },
        h("h2", { id: "console-registry-heading", text: "Public meshes" }),
        h("p", {
          class: "hint",
          text: "Meshes that announce themselves to this node, when it acts as a registry. Each one's address was seen serving its identity; its name and counts are what it says of itself.",
        }),
        this.registryBox,
        this.registryError,
      ),
    );
    this.manifestLoaded = this.loadManifest();
    this.refresh();
    this.timer = setInterval(() => {
      if (!document.hidden) this.refresh();
    }, pollMs());
    document.addEventListener("visibilitychange", this.onVisible);
  }

  hide() {
    clearInterval(this.timer);
    this.timer = 0;
    document.removeEventListener("visibilitychange", this.onVisible);
    this.body = null;
  }

  onEvent(event) {
    // a room deleted here may have been shared; a mirror may have been joined
    if (this.body && (event.type === "room_deleted" || event.type === "participant_joined")) {
      const me = this.app.store.me;
      if (event.type === "room_deleted" || (me && event.participant && event.participant.participantId === me.participantId)) {
        this.refresh();
      }
    }
  }

  // loading -----------------------------------------------------------------------

  async loadManifest() {
    try {
      this.manifest = await this.app.api.get("/.well-known/mesh-manifest.json");
    } catch (error) {
      if (this.body) fill(this.identityBox, h("p", { class: "error", role: "alert", text: reason(error) }));
      return;
    }
    if (this.body) {
      this.renderIdentity();
      this.renderRegistry();
    }
  }

  /** Ask the node again (one round at a time; a call meanwhile waits for it). */
  refresh() {
    if (!this.loading) {
      this.loading = this.load().finally(() => {
        this.loading = null;
      });
    }
    return this.loading;
  }

  async load() {
    const { api } = this.app;
    await this.manifestLoaded;
    // only a registry lists public meshes (the manifest says whether this node is one)
    const fed = (this.manifest && this.manifest.federation) || {};
    const [connections, rooms, meshes] = await Promise.allSettled([
      api.get("/api/connections"),
      api.rooms(),
      fed.isRegistry === false ? Promise.resolve(null) : api.get("/api/meshes/public"),
    ]);
    if (!this.body) return;
    if (connections.status === "fulfilled") {
      this.connections = connections.value;
      this.connectionsError.textContent = "";
    } else {
      this.connectionsError.textContent = reason(connections.reason);
    }
    if (rooms.status === "fulfilled") this.rooms = rooms.value;
    if (meshes.status === "fulfilled" && meshes.value === null) {
      this.meshes = [];
      this.isRegistry = false;
      this.registryError.textContent = "";
    } else if (meshes.status === "fulfilled") {
      this.meshes = meshes.value;
      this.isRegistry = true;
      this.registryError.textContent = "";
    } else if (meshes.reason && meshes.reason.code === "registry_disabled") {
      this.meshes = [];
      this.isRegistry = false;
      this.registryError.textContent = "";
    } else {
      this.registryError.textContent = reason(meshes.reason);
    }
    this.renderConnections();
    this.renderShares();
    this.renderRelay();
    this.renderRegistry();
  }

  /** Replace *box*'s content with *build()* only when *signature* changed, so
   * a poll does not reset what someone is choosing or focusing. */
  draw(box, signature, build) {
    if (this.drawn.get(box) === signature) return;
    const focused = box.contains(document.activeElement) ? document.activeElement : null;
    const focusKey = focused && focused.dataset ? focused.dataset.key : null;
    this.drawn.set(box, signature);
    fill(box, build());
    if (focusKey) {
      const again = box.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
      if (again) again.focus();
    }
  }

  // this node ------------------------------------------------------------------------

  renderIdentity() {
    const m = this.manifest;
    if (!m) return;
    const rest = (m.endpoints && m.endpoints.rest) || "";
    const address = rest.replace(/\/api$/, "");
    const fed = m.federation || { enabled: false, registry: null };
    const item = (term, value) => [h("dt", { text: term }), h("dd", {}, value)];
    fill(
      this.identityBox,
      h(
        "dl",
        { class: "console-b-facts" },
        item("Name", h("bdi", { text: m.name || "(not set up)" })),
        item("Address", h("span", { class: "console-b-url", text: address })),
        item("Identity", h("code", { class: "console-b-did", text: m.did || "" })),
        item("Federation", fed.enabled ? "On: an admin accepts or declines each request" : "Off on this node"),
        item("Announced to", fed.registry ? h("span", { class: "console-b-url", text: fed.registry }) : "No registry"),
      ),
      h("p", {
        class: "hint",
        text: "Give another node's admin this address: they request a connection with it, and you accept it here.",
      }),
    );
  }

  // requesting ---------------------------------------------------------------------------

  requestPart() {
    this.requestUrl = h("input", {
      type: "url",
      name: "url",
      required: true,
      placeholder: "https://mesh.example.org",
      autocomplete: "off",
      spellcheck: "false",
    });
    this.requestMessage = h("textarea", { name: "message", rows: "2", maxlength: "1000" });
    this.requestStatus = statusLine();
    this.requestError = errorLine();
    const submit = h("button", { type: "submit", class: "primary", text: "Send request" });
    return h(
      "section",
      { "aria-labelledby": "console-request-heading" },
      h("h2", { id: "console-request-heading", text: "Request a connection" }),
      h(
        "form",
        { class: "console-form", on: { submit: (e) => this.request(e, submit) } },
        field("Node address", this.requestUrl, "The other node's base URL. Its admin accepts or declines."),
        field("Message (optional)", this.requestMessage, "Shown to the other node's admin with the request."),
        h("div", { class: "row" }, submit),
        this.requestStatus,
        this.requestError,
      ),
    );
  }

  async request(event, submit) {
    event.preventDefault();
    this.requestStatus.textContent = "Asking the other node…";
    const body = { url: this.requestUrl.value.trim() };
    const message = this.requestMessage.value.trim();
    if (message) body.message = message;
    const made = await guarded(submit, this.requestError, () => this.app.api.post("/api/connections/request", body));
    if (made === undefined) {
      this.requestStatus.textContent = "";
      return;
    }
    this.requestUrl.value = "";
    this.requestMessage.value = "";
    this.requestStatus.textContent = `Request sent to ${made.name}. It waits for their admin.`;
    await this.refresh();
  }

  /** Fill the request form with a listed mesh's address (the registry's button). */
  prefill(mesh) {
    this.requestUrl.value = mesh.url;
    this.requestError.textContent = "";
    this.requestStatus.textContent = `Address of ${mesh.name} filled in: add a message if you like, then send the request.`;
    this.requestUrl.scrollIntoView({ block: "center", behavior: "auto" });
    this.requestUrl.focus();
  }

  // connections --------------------------------------------------------------------------------

  renderConnections() {
    const list = this.connections;
    const signature = JSON.stringify(
      list.map((c) => [c.id, c.status, c.direction, c.name, c.url, c.did, c.message, c.updatedAt]),
    );
    this.draw(this.connectionsBox, signature, () => {
      if (!list.length) return h("p", { class: "hint", text: "No connections yet." });
      const order = { pending: 0, accepted: 1, declined: 2, disconnected: 3 };
      const sorted = [...list].sort(
        (a, b) => (order[a.status] ?? 9) - (order[b.status] ?? 9) || String(b.updatedAt).localeCompare(String(a.updatedAt)),
      );
      return wide(table(
        "Connections with other nodes",
        ["Node", "State", "Actions", "Address", "Asked by", "Message", "Since"],
        sorted.map((c) => [
          h(
            "span",
            { class: "console-b-peer" },
            h("bdi", { class: "console-b-name", text: c.name }),
            h("code", { class: "console-b-did", title: c.did, text: shortDid(c.did) }),
          ),
          h("span", { class: `console-b-state ${c.status}`, text: stateText(c) }),
          this.connectionActions(c),
          h("span", { class: "console-b-url", text: c.url }),
          c.direction === "outbound" ? "This node" : "Them",
          c.message ? h("bdi", { class: "console-b-message", text: c.message }) : "",
          when(c.updatedAt),
        ]),
      ));
    });
  }

  connectionActions(c) {
    const button = (text, label, cls, action) =>
      h("button", {
        type: "button",
        class: `small ${cls}`.trim(),
        text,
        "aria-label": `${label} ${c.name}`,
        dataset: { key: `${text}-${c.id}` },
        on: { click: (e) => action(e.currentTarget) },
      });
    const buttons = [];
    if (c.status === "pending" && c.direction === "inbound") {
      buttons.push(
        button("Accept", "Accept the request of", "primary", (b) => this.answer(c, "accept", b)),
        button("Decline", "Decline the request of", "", (b) => this.answer(c, "decline", b)),
      );
    } else if (c.status === "pending") {
      buttons.push(button("Withdraw", "Withdraw the request to", "", (b) => this.end(c, b)));
    } else if (c.status === "accepted") {
      buttons.push(button("Disconnect", "Disconnect from", "danger", (b) => this.end(c, b)));
    }
    return buttons.length ? h("span", { class: "row" }, buttons) : "";
  }

  async answer(c, verb, button) {
    const done = await guarded(button, this.connectionsError, () =>
      this.app.api.post(`/api/connections/${seg(c.id)}/${verb}`),
    );
    if (done === undefined) return;
    this.connectionsStatus.textContent =
      verb === "accept" ? `Connected with ${c.name}.` : `Declined the request of ${c.name}.`;
    // a decline ends the request here even when the requester cannot be told
    if (done && done.peerNotified === false) this.connectionsStatus.textContent += " The other node was not told.";
    await this.refresh();
  }

  async end(c, button) {
    const pending = c.status === "pending";
    const sure = await confirmAction(
      pending ? `Withdraw the request to ${c.name}?` : `Disconnect from ${c.name}?`,
      pending
        ? "The other node is told, and its admin can no longer accept it."
        : "Both nodes stop sharing rooms over this connection at once; mirrored rooms stay as ordinary rooms with their history. Either node may ask again later.",
      pending ? "Withdraw request" : "Disconnect",
    );
    if (!sure) {
      if (button.isConnected) button.focus();
      return;
    }
    let ended;
    try {
      button.disabled = true;
      this.connectionsError.textContent = "";
      ended = await this.app.api.delete(`/api/connections/${seg(c.id)}`);
    } catch (error) {
      button.disabled = false;
      if (error.code === "peer_unreachable" || error.code === "peer_refused") {
        this.offerForce(c, reason(error));
      } else {
        this.connectionsError.textContent = reason(error);
      }
      return;
    }
    this.connectionsStatus.textContent = pending ? `Request to ${c.name} withdrawn.` : `Disconnected from ${c.name}.`;
    if (ended && ended.peerNotified === false) this.connectionsStatus.textContent += " The other node was not told.";
    await this.refresh();
  }

  /** The peer could not be told: offer to end the connection here only. */
  offerForce(c, why) {
    const force = h("button", {
      type: "button",
      class: "small danger",
      text: "End it here only",
      "aria-label": `End the connection with ${c.name} here only`,
      on: {
        click: async (e) => {
          const done = await guarded(e.currentTarget, this.connectionsError, () =>
            this.app.api.delete(`/api/connections/${seg(c.id)}?force=true`),
          );
          if (done === undefined) return;
          this.connectionsStatus.textContent = `The connection with ${c.name} is ended here; the other node was not told.`;
          await this.refresh();
        },
      },
    });
    fill(this.connectionsError, `${why} `, force);
  }

  // shared rooms -----------------------------------------------------------------------------

  renderShares() {
    const accepted = this.connections.filter((c) => c.status === "accepted");
    const roomsById = new Map(this.rooms.map((r) => [r.roomId, r]));
    const signature = JSON.stringify([
      accepted.map((c) => [c.id, c.name, c.sharedRooms.map((s) => [s.roomId, s.name, s.direction])]),
      this.rooms.map((r) => [r.roomId, r.name, r.kind, r.origin, r.joined]),
    ]);
    this.draw(this.sharesBox, signature, () => {
      if (!accepted.length) return h("p", { class: "hint", text: "Rooms are shared over a connection once it is accepted." });
      return accepted.map((c) => this.sharesOf(c, roomsById));
    });
  }

  sharesOf(c, roomsById) {
    const headingId = `console-share-${c.id}`;
    const ours = c.sharedRooms.filter((s) => s.direction === "outbound");
    const theirs = c.sharedRooms.filter((s) => s.direction === "inbound");
    const sharedHere = new Set(ours.map((s) => s.roomId));
    const shareable = this.rooms
      .filter((r) => r.kind !== "dm" && !r.origin && !sharedHere.has(r.roomId))
      .sort((a, b) => a.name.localeCompare(b.name));

    const unshare = (s) =>
      h("button", {
        type: "button",
        class: "small",
        text: "Stop sharing",
        "aria-label": `Stop sharing ${s.name} with ${c.name}`,
        dataset: { key: `unshare-${c.id}-${s.roomId}` },
        on: { click: (e) => this.unshare(c, s, e.currentTarget) },
      });

    const oursPart = ours.length
      ? table(
          `Rooms of this node shared with ${c.name}`,
          ["Room", "Actions", "Shared"],
          ours.map((s) => [h("bdi", { text: s.name }), unshare(s), when(s.sharedAt)]),
        )
      : h("p", { class: "hint", text: `No room of this node is shared with ${c.name}.` });

    const theirsPart = theirs.length
      ? table(
          `Rooms ${c.name} shares with this node`,
          ["Room here", "Actions", "Shared"],
          theirs.map((s) => {
            const room = roomsById.get(s.roomId);
            const joined = room && room.joined;
            const open = joined
              ? h("a", { href: `#room/${s.roomId}`, class: "console-b-open", text: "Open", "aria-label": `Open ${s.name}` })
              : h("button", {
                  type: "button",
                  class: "small primary",
                  text: "Join",
                  "aria-label": `Join ${s.name}`,
                  dataset: { key: `join-${s.roomId}` },
                  on: { click: (e) => this.join(s, e.currentTarget) },
                });
            return [h("bdi", { text: s.name }), h("span", { class: "row" }, open, unshare(s)), when(s.sharedAt)];
          }),
        )
      : h("p", { class: "hint", text: `${c.name} shares no room with this node yet.` });

    let form = null;
    if (shareable.length) {
      const select = h(
        "select",
        { name: "roomId", dataset: { key: `pick-${c.id}` } },
        shareable.map((r) => h("option", { value: r.roomId, text: r.name })),
      );
      const submit = h("button", {
        type: "submit",
        class: "small",
        text: "Share",
        "aria-label": `Share the room with ${c.name}`,
        dataset: { key: `share-${c.id}` },
      });
      form = h(
        "form",
        { class: "console-inline-form", on: { submit: (e) => this.share(e, c, select, submit) } },
        field(`Room to share with ${c.name}`, select),
        h("div", { class: "field" }, submit),
      );
    }
    return h(
      "div",
      { class: "console-b-share", role: "group", "aria-labelledby": headingId },
      h("h3", { id: headingId }, "With ", h("bdi", { text: c.name })),
      oursPart,
      form,
      theirsPart,
    );
  }

  async share(event, c, select, submit) {
    event.preventDefault();
    const room = this.rooms.find((r) => r.roomId === select.value);
    const done = await guarded(submit, this.sharesError, () =>
      this.app.api.post(`/api/connections/${seg(c.id)}/rooms`, { roomId: select.value }),
    );
    if (done === undefined) return;
    this.sharesStatus.textContent = `${room ? room.name : done.name} is shared with ${c.name}.`;
    await this.refresh();
  }

  async unshare(c, s, button) {
    const sure = await confirmAction(
      `Stop sharing ${s.name} with ${c.name}?`,
      s.direction === "outbound"
        ? "The other node keeps its copy with its history, but nothing more is relayed either way."
        : "This node keeps its copy with its history, but nothing more is relayed either way.",
      "Stop sharing",
    );
    if (!sure) {
      if (button.isConnected) button.focus();
      return;
    }
    const done = await guarded(button, this.sharesError, () =>
      this.app.api.delete(`/api/connections/${seg(c.id)}/rooms/${seg(s.roomId)}`),
    );
    if (done === undefined) return;
    this.sharesStatus.textContent = `${s.name} is no longer shared with ${c.name}.`;
    await this.refresh();
  }

  async join(s, button) {
    // joins, then opens the room in the chat (the page's own join)
    await guarded(button, this.sharesError, () => this.app.joinRoom(s.roomId));
  }

  // relay ------------------------------------------------------------------------------------------

  renderRelay() {
    const linked = this.connections.filter((c) => c.status === "accepted");
    const signature = JSON.stringify(linked.map((c) => [c.id, c.name, c.relay]));
    this.draw(this.relayBox, signature, () => {
      if (!linked.length) return h("p", { class: "hint", text: "No connected peer." });
      return wide(table(
        "Relay link per connected peer",
        ["Peer", "Link", "Waiting", "Relayed", "Failures in a row", "Last success", "Last error"],
        linked.map((c) => {
          const r = c.relay;
          if (!r) return [h("bdi", { text: c.name }), "Not running", "", "", "", "", ""];
          const health = !r.running ? "Stopped" : r.failures ? "Retrying" : "Running";
          return [
            h("bdi", { text: c.name }),
            h("span", { class: `console-b-link ${health.toLowerCase()}`, text: health }),
            String(r.waiting),
            String(r.relayed),
            String(r.failures),
            when(r.lastRelayedAt),
            r.lastError ? h("span", { class: "console-b-message", text: r.lastError }) : "None",
          ];
        }),
      ));
    });
  }

  // registry -------------------------------------------------------------------------------------------

  renderRegistry() {
    const own = this.manifest ? this.manifest.did : null;
    const connected = new Set(
      this.connections.filter((c) => c.status === "pending" || c.status === "accepted").map((c) => c.did),
    );
    const signature = JSON.stringify([own, [...connected], this.meshes, this.isRegistry]);
    this.draw(this.registryBox, signature, () => {
      if (this.isRegistry === false)
        return h("p", {
          class: "hint",
          text: "This node is not a registry. The owner can make it one in the mesh settings (List other public meshes).",
        });
      if (!this.meshes.length) return h("p", { class: "hint", text: "No mesh has announced itself to this node." });
      return wide(table(
        `${this.meshes.length} public ${this.meshes.length === 1 ? "mesh" : "meshes"}`,
        ["Mesh", "Address", "Description", "Members", "Bots", "Version", "Last heard", "Actions"],
        this.meshes.map((m) => {
          let action;
          if (m.did === own) action = h("span", { class: "hint", text: "This node" });
          else if (connected.has(m.did)) action = h("span", { class: "hint", text: "Connected or asked" });
          else
            action = h("button", {
              type: "button",
              class: "small",
              text: "Request connection",
              "aria-label": `Request connection to ${m.name}`,
              dataset: { key: `request-${m.did}` },
              on: { click: () => this.prefill(m) },
            });
          return [
            h("bdi", { class: "console-b-name", text: m.name }),
            h("span", { class: "console-b-url", text: m.url }),
            m.description ? h("bdi", { class: "console-b-message", text: m.description }) : "",
            String(m.members),
            String(m.bots),
            m.version || "",
            when(m.lastSeen),
            action,
          ];
        }),
      ));
    });
  }
}
