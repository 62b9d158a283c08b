// The web client for humans (docs/web.md). It talks to the node only through
// the public REST API and /ws, like any other client.
//
// The token is kept in localStorage (docs/decisions/0030-web-client.md): a
// reload keeps the session; signing out revokes it on the node.

import { Api } from "./api.js";
import { Composer, Drafts } from "./composer.js";
import { $, bdi, cursorCompare, fill, h, longTime, newClientId, shortTime, toast } from "./dom.js";
import { Live } from "./live.js";
import { VIEWS, loadStyle, offered } from "./panels.js";
import { Timeline } from "./room.js";
import { roomChanged, roomTools, run } from "./roomtools.js";
import { Sidebar } from "./sidebar.js";
import { Outbox, Room, Store } from "./state.js";

const TOKEN_KEY = "mesh.token";
const PAGE = 50;
const TYPING_EVERY = 2500;
const TYPING_SHOWN = 5000;
const READ_EVERY = 1000;
/** live messages held for a room shown away from its newest (a jump), at most */
const HELD_MAX = 1000;

const SESSION_NOTICES = {
  token_expired: "Your session has expired. Please sign in again.",
  token_revoked: "You were signed out. Please sign in again.",
  invalid_token: "Your session is no longer valid. Please sign in again.",
  unauthorized: "Please sign in again.",
  removed: "Your account was removed from this mesh.",
};

/** Whether a key press happens while typing somewhere. */
function typing(target) {
  return Boolean(target && target.closest && target.closest("input, textarea, select, [contenteditable]"));
}

/** A percent-encoded address part, or the part itself when it is not one. */
function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

class App {
  constructor() {
    this.token = localStorage.getItem(TOKEN_KEY);
    this.api = new Api(
      () => this.token,
      (error) => this.sessionEnded(error.code),
      () => this.refreshMe(),
    );
    this.store = new Store();
    this.auth = null; // auth.js, fetched when the sign-in screen is first shown
    this.live = null;
    this.currentRoomId = null;
    this.drafts = new Drafts();
    this.typingSent = new Map(); // roomId -> time
    this.typingSeen = new Map(); // roomId -> Map(participantId -> until)
    this.typingTimer = 0;
    this.readTimer = 0;
    this.readDue = 0;
    this.thread = null; // thread.js's pane, made when a thread first opens
    this.keptReplies = new Map(); // "roomId threadId" -> a refused reply's {content, reason}
    this.wired = false;
    this.panels = new Map(); // view id -> Panel, made when first opened
    this.currentPanel = null;
    this.panelLoads = 0; // the latest route's number, to drop slower loads
    this.lastSnapshot = null;
    this.outbox = new Outbox(
      (item) => this.post(item),
      () => this.outboxChanged(),
    );
  }

  // start, sign in, sign out ------------------------------------------------------

  async boot() {
    window.addEventListener("storage", (event) => {
      if (event.key === TOKEN_KEY && !event.newValue && this.token) this.signOut("You signed out in another tab.", false);
    });
    let status;
    for (let attempt = 0; ; attempt++) {
      try {
        status = await this.api.get("/api/setup/status");
        break;
      } catch {
        $("boot").textContent = "The node cannot be reached. Trying again…";
        await new Promise((r) => setTimeout(r, Math.min(10000, 1000 * 2 ** attempt)));
      }
    }
    this.store.status = status;
    if (this.token && status.initialized) {
      $("boot").hidden = true;
      await this.enter();
    } else {
      this.token = null;
      await this.showAuth(status);
      $("boot").hidden = true;
    }
  }

  /** The sign-in screen: its code is fetched when first shown (a signed-in
   * visit never needs it). */
  async showAuth(status, notice = "") {
    this.authLoad ||= Promise.all([import("./auth.js"), loadStyle("auth.css").catch(() => {})]).then(
      ([m]) => (this.auth = new m.AuthScreen(this.api, (session) => this.signedIn(session))),
    );
    (await this.authLoad).show(status, notice);
  }

  signedIn(session) {
    this.token = session.token;
    localStorage.setItem(TOKEN_KEY, session.token);
    this.enter();
  }

  async enter() {
    let me;
    try {
      const fresh = this.store.status && this.store.status.initialized;
      [me, this.store.status] = await Promise.all([
        this.api.get("/api/auth/me"),
        fresh ? this.store.status : this.api.get("/api/setup/status"),
      ]);
    } catch (error) {
      if (this.token === null) return; // the session ended (handled)
      $("boot").hidden = false;
      $("boot").textContent = `The node cannot be reached (${error.message}). Reload to try again.`;
      return;
    }
    this.store.me = me;
    if (this.auth) this.auth.hide();
    this.wire();
    // notifications turned on here earlier: their code is needed at once
    if (localStorage.getItem(`mesh.notify.${me.participantId}`) === "on") this.loadNotifier().catch(() => {});
    this.outbox.restore(`mesh.outbox.${me.participantId}`);
    this.drafts.attach(me.participantId);
    $("chat").hidden = false;
    $("me-name").textContent = me.name;
    $("mesh-name").textContent = this.store.status.meshName || "";
    this.renderMe();
    this.live = new Live({
      token: () => this.token,
      onSnapshot: (snapshot, resumed) => this.onSnapshot(snapshot, resumed),
      onEvent: (event) => this.onEvent(event),
      onStatus: (state, seconds) => this.onConnection(state, seconds),
      onSessionEnded: (code) => this.sessionEnded(code),
    });
    this.live.start();
  }

  sessionEnded(code) {
    // (a sign-out of one's own ends the session too: that one goes on)
    if (!this.token || this.signingOut) return;
    this.signOut(SESSION_NOTICES[code] || SESSION_NOTICES.invalid_token, false);
  }

  /** Leave the chat: revoke the token on the node (when the person asked),
   * forget it, and show the sign-in form with *notice*. */
  async signOut(notice = "", revoke = true) {
    const token = this.token;
    if (revoke && token) {
      this.signingOut = true;
      try {
        await this.api.post("/api/auth/logout", {});
      } catch {
        // signed out here anyway
      }
    }
    this.signingOut = false;
    this.token = null;
    localStorage.removeItem(TOKEN_KEY);
    if (this.live) this.live.stop();
    this.live = null;
    this.store = new Store();
    // signing out on purpose drops unsent messages; a session that ended
    // keeps them for when this person signs in again
    if (revoke) this.outbox.clear();
    else this.outbox.detach();
    this.currentRoomId = null;
    if (this.tasks) this.tasks.reset();
    this.tasksGone = false;
    this.drafts.clear(revoke);
    this.keptReplies.clear();
    if (this.search) this.search.reset();
    else $("search-input").value = "";
    if (this.notifier) this.notifier.forget();
    this.closeThread();
    this.leavePanel();
    // the views hold what this person saw: the next one starts afresh
    for (const panel of this.panels.values()) {
      try {
        panel.dispose();
      } catch (error) {
        console.error(error);
      }
    }
    this.panels.clear();
    this.lastSnapshot = null;
    $("chat").hidden = true;
    for (const dialog of document.querySelectorAll("dialog[open]")) dialog.close();
    history.replaceState(null, "", location.pathname);
    let status = { initialized: true, registrationMode: "closed", visibility: "private", meshName: "" };
    try {
      status = await this.api.get("/api/setup/status");
    } catch {
      // show the sign-in form anyway
    }
    this.store.status = status;
    await this.showAuth(status, notice);
  }

  wire() {
    if (this.wired) return;
    this.wired = true;
    this.sidebar = new Sidebar(this);
    this.timeline = new Timeline(
      this,
      { scroll: $("timeline"), list: $("message-list"), status: $("history-status"), jump: $("jump-newest") },
      false,
    );
    this.composer = new Composer(this, $("composer-slot"), false);
    this.tasks = null; // tasks.js, fetched when a room first has an open task
    this.search = null; // search.js, fetched when first used
    this.notifier = null; // notify.js, fetched when wanted
    this.wireSearch();
    this.wireSettings();
    $("signout").addEventListener("click", () => this.signOut());
    const browse = () => this.dialog("RoomBrowser");
    $("browse-rooms").addEventListener("click", browse);
    $("new-dm").addEventListener("click", () => this.dialog("DmPicker"));
    $("reconnect-now").addEventListener("click", () => this.live && this.live.reconnectNow());
    $("leave-room").addEventListener("click", () => this.leaveRoom(this.currentRoomId));
    $("hide-dm").addEventListener("click", () => this.hideDm(this.currentRoomId));
    $("mute-room").addEventListener("click", () => this.toggleMute(this.currentRoomId));
    $("room-threads").addEventListener("click", () => this.showThreads());
    $("mark-all-read").addEventListener("click", () => this.markAllRead());
    $("nav-toggle").addEventListener("click", () => this.toggleNav());
    $("sidebar").addEventListener("click", (event) => {
      if (event.target.closest("a.nav-item")) this.toggleNav(false);
    });
    window.addEventListener("hashchange", () => this.route());
    // "last seen 5 minutes ago" ages
    setInterval(() => {
      if (!this.store.me) return;
      this.sidebar.renderPeople();
      this.refreshMe();
    }, 60000);
    document.addEventListener("visibilitychange", () => {
      // leaving the tab sends what was seen within the last second
      if (document.visibilityState === "hidden") this.flushReads();
      else this.markVisibleRead();
    });
    window.addEventListener("pagehide", () => this.flushReads());
    window.addEventListener("focus", () => {
      this.markVisibleRead();
      this.refreshMe();
    });
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || event.defaultPrevented) return;
      if (document.querySelector("dialog[open]")) return;
      if ($("chat").classList.contains("nav-open")) this.toggleNav(false);
    });
  }

  // search and settings (their code is fetched when first used) -------------------

  /** search.js and its styles, once; resolves with the Search. */
  loadSearch() {
    if (!this.searchLoad) {
      this.searchLoad = Promise.all([import("./search.js"), loadStyle("search.css")]).then(([module]) => {
        this.search = new module.Search(this);
        return this.search;
      });
      this.searchLoad.catch(() => {
        this.searchLoad = null;
      });
    }
    return this.searchLoad;
  }

  withSearch(fn) {
    this.loadSearch().then(fn, (error) => toast(`Search could not be loaded: ${error.message}`));
  }

  /** Open the rooms or new-DM dialog (dialogs.js: fetched when one first opens). */
  async dialog(name) {
    let module;
    try {
      module = await import("./dialogs.js");
    } catch (error) {
      toast(`The dialog could not be loaded: ${error.message}`);
      return;
    }
    this.dialogs ||= {};
    (this.dialogs[name] ||= new module[name](this)).open();
  }

  /** The field and its shortcuts: `/` (not while typing) and Ctrl/Cmd+K. */
  wireSearch() {
    const input = $("search-input");
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.withSearch((search) => {
        search.open();
        search.run(false, true);
      });
    });
    input.addEventListener("input", () => {
      // emptied while the search is closed (Escape in the field): nothing to show
      if (!input.value && (!this.search || this.search.panel.hidden)) return;
      this.withSearch((search) => {
        search.open();
        search.schedule();
      });
    });
    input.addEventListener("focus", () => {
      if (this.search) this.search.onFocus();
      else if (input.value.trim()) this.withSearch((search) => search.onFocus());
    });
    document.addEventListener("keydown", (event) => {
      if (event.defaultPrevented || !this.store.me || document.querySelector("dialog[open]")) return;
      const slash = event.key === "/" && !event.ctrlKey && !event.metaKey && !event.altKey && !typing(event.target);
      // (event.code: the key of layouts where it types another letter)
      const mod = (event.ctrlKey || event.metaKey) && !event.altKey;
      const k = mod && !event.shiftKey && (event.key === "k" || event.key === "K" || event.code === "KeyK");
      const f = mod && event.shiftKey && (event.key === "f" || event.key === "F" || event.code === "KeyF");
      if (k) {
        event.preventDefault();
        this.openSwitcher();
        return;
      }
      if (!slash && !f) return;
      event.preventDefault();
      input.focus();
      input.select();
      this.withSearch((search) => search.open());
    });
  }

  /** The room switcher (switcher.js, Ctrl/Cmd+K), fetched on first use. */
  async openSwitcher() {
    try {
      const [module] = await Promise.all([import("./switcher.js"), loadStyle("switcher.css")]);
      this.switcher ||= new module.Switcher(this);
    } catch (error) {
      toast(`The room switcher could not be loaded: ${error.message}`);
      return;
    }
    if (this.store.me && !document.querySelector("dialog[open]")) this.switcher.open();
  }

  /** notify.js, once; resolves with the Notifier. */
  loadNotifier() {
    if (!this.notifierLoad) {
      this.notifierLoad = import("./notify.js").then((module) => {
        this.notifier = new module.Notifier(this);
        return this.notifier;
      });
      this.notifierLoad.catch(() => {
        this.notifierLoad = null;
      });
    }
    return this.notifierLoad;
  }

  wireSettings() {
    const dialog = $("settings-dialog");
    for (const button of dialog.querySelectorAll("[data-close]")) {
      button.addEventListener("click", () => dialog.close());
    }
    $("open-settings").addEventListener("click", async () => {
      let notifier;
      try {
        notifier = await this.loadNotifier();
      } catch (error) {
        toast(`Settings could not be loaded: ${error.message}`);
        return;
      }
      notifier.render();
      run(this, "settings", "accountSettings", dialog);
      dialog.showModal();
      $("notify-toggle").focus();
    });
  }

  toggleNav(open) {
    const chat = $("chat");
    const next = open === undefined ? !chat.classList.contains("nav-open") : open;
    chat.classList.toggle("nav-open", next);
    $("nav-toggle").setAttribute("aria-expanded", String(next));
    $("nav-toggle").setAttribute("aria-label", next ? "Hide rooms and people" : "Show rooms and people");
    if (next) {
      const first = $("sidebar").querySelector("a, button");
      if (first) first.focus();
    } else if (open === false && chat.contains(document.activeElement) && $("sidebar").contains(document.activeElement)) {
      $("nav-toggle").focus();
    }
  }

  /** Who I am in the top bar, and what my role lets me start. */
  renderMe() {
    const { me } = this.store;
    $("me-role").textContent = me.kind === "guest" ? "guest" : me.role;
    if (me.kind === "guest") this.later("welcome.js", "renderGuestBanner");
    else $("guest-banner").hidden = true;
    $("new-dm").hidden = !this.store.can("dms.create");
  }

  /**
   * Ask the node again who I am: an admin may have given me another role, or
   * changed what a role may do. Done when the node refuses something
   * (403), when the window gets the focus, after a reconnection and once a
   * minute; a change is followed at once (links, message boxes, the view).
   */
  async refreshMe() {
    const before = this.store.me;
    if (!before || this.refreshingMe) return;
    this.refreshingMe = true;
    let me;
    try {
      me = await this.api.get("/api/auth/me");
    } catch {
      return;
    } finally {
      this.refreshingMe = false;
    }
    if (this.store.me !== before) return; // signed out or in again meanwhile
    this.store.me = me;
    const same = (a, b) => a.role === b.role && a.permissions.join() === b.permissions.join();
    if (same(before, me)) return;
    this.renderMe();
    this.renderPanelLinks();
    // the rooms' own rules are per role: read the open ones again
    for (const room of this.store.rooms.values()) room.permissions = null;
    for (const roomId of new Set([this.currentRoomId, this.threadRoomId])) {
      const room = this.store.rooms.get(roomId);
      if (room) this.loadRoomDetails(room);
    }
    if (this.currentPanel && !offered(this.currentPanel.view, this.store)) this.route();
    else if (this.currentPanel) this.showPanel(this.currentPanel, this.currentArg);
  }

  onConnection(state, seconds) {
    const el = $("connection");
    const button = $("reconnect-now");
    if (state === "connected") {
      el.textContent = "";
      el.className = "connection";
      button.hidden = true;
      this.outbox.resume();
    } else if (state === "connecting") {
      el.textContent = "Connecting…";
      el.className = "connection busy";
    } else {
      el.textContent = `Connection lost. Reconnecting in ${seconds} s…`;
      el.className = "connection lost";
      button.hidden = false;
    }
  }

  // the live stream -----------------------------------------------------------------

  onSnapshot(snapshot, resumed) {
    this.snapshotCursor = snapshot.cursor;
    this.lastSnapshot = snapshot;
    this.store.applySnapshot(snapshot);
    if (resumed) {
      this.refreshMe();
      // edits, deletes and reactions of the gap are not replayed: fetch again
      for (const room of this.store.rooms.values()) {
        room.pins = undefined; // (and the pins of the gap: read again by roomtools.js)
        if (room.roomId !== this.currentRoomId) room.forgetMessages();
      }
      const current = this.store.rooms.get(this.currentRoomId);
      if (current) {
        this.renderRoomHeader(current);
        this.loadNewest(current);
      }
      if (this.threadRootId) this.thread.load();
    }
    this.flushReads();
    const status = this.refreshStatus();
    this.sidebar.render();
    this.renderPanelLinks();
    for (const panel of this.panels.values()) panel.onSnapshot(snapshot, resumed);
    if (this.tasks) this.tasks.onSnapshot(resumed);
    else if (resumed && this.store.rooms.has(this.currentRoomId)) this.showTasks(this.store.rooms.get(this.currentRoomId));
    if (!resumed) {
      // how long the first room list took (docs/benchmarks.md)
      performance.mark("mesh:rooms-rendered");
      // (the read positions first: a room with unread messages opens at them)
      status.then(() => this.route());
    }
    else if (this.currentRoomId && !this.store.rooms.get(this.currentRoomId)) this.showWelcome();
  }

  async refreshStatus() {
    try {
      const status = await this.api.get("/api/status");
      this.store.applyStatus(status);
    } catch {
      return;
    }
    this.flushReads(); // marks the node has not stored (lost with a connection)
    this.renderCounts();
    this.markVisibleRead();
  }

  onEvent(event) {
    const { store } = this;
    for (const panel of this.panels.values()) {
      try {
        panel.onEvent(event);
      } catch (error) {
        console.error(error); // one view's fault never stops the chat's events
      }
    }
    this.seen?.onEvent(event);
    switch (event.type) {
      case "message":
        return this.onMessage(event);
      case "task_created":
      case "task_updated":
        return this.onTask(event);
      case "message_edited":
      case "message_deleted":
      case "reaction_added":
      case "reaction_removed":
        return this.onMessageChange(event);
      case "participant_joined":
      case "participant_left":
        return this.onMembership(event);
      case "room_deleted": {
        const room = store.rooms.get(event.roomId);
        store.rooms.delete(event.roomId);
        if (event.roomId === this.currentRoomId) {
          this.showWelcome(room ? `The room ${room.name} was deleted.` : "This room was deleted.");
        }
        if (event.roomId === this.threadRoomId) this.closeThread();
        this.sidebar.render();
        this.renderTitle();
        return;
      }
      case "room_access":
        return this.act("onRoomAccess", event);
      case "room_updated":
      case "message_pinned":
      case "message_unpinned":
        return roomChanged(this, event);
      case "typing":
        return this.onTyping(event);
      case "presence": {
        const p = store.participant(event.participantId);
        if (p) {
          p.online = event.online;
          if (event.lastSeen) p.lastSeen = event.lastSeen;
          this.sidebar.renderPeople();
          this.sidebar.renderDms();
        }
        return;
      }
      case "participant_updated":
        Object.assign(store.participant(event.participant.participantId) || {}, event.participant);
        this.sidebar.render();
        return this.timeline.renderAll(); // (a display name beside the name)
      case "participant_moved": {
        const p = store.participant(event.participantId);
        if (p) p.position = { roomId: event.roomId, x: event.x, y: event.y, z: event.z };
        return;
      }
      case "room_muted": {
        const room = store.rooms.get(event.roomId);
        if (room) {
          room.muted = Boolean(event.muted);
          if (room.roomId === this.currentRoomId) this.renderRoomHeader(room);
          this.renderCounts();
        }
        return;
      }
      case "room_read": {
        const room = store.rooms.get(event.roomId);
        // a mark older than what the person has seen here counts messages
        // they have read already (its newer mark is on its way): keep ours
        if (room && !room.isAheadOf(event.cursor)) {
          room.unread = event.unread;
          room.mentions = event.mentions;
          room.markedRead = event.cursor;
          room.seenCursor = event.cursor;
          this.renderCounts();
        }
        return;
      }
      case "error":
        return this.onError(event);
      default:
        return undefined;
    }
  }

  // a room's open tasks (js/tasks.js): its code is fetched the first time a
  // room has one; until then a room asks the node when it opens, and the
  // answer is handed to the module (read once)

  async showTasks(room) {
    let answer;
    if (!this.tasks) {
      if (this.tasksGone) return;
      try {
        answer = await this.api.get(`/api/tasks?roomId=${encodeURIComponent(room.roomId)}&open=true&limit=50`);
        if (!answer.tasks.length) return;
      } catch (error) {
        this.tasksGone = error.code === "not_found"; // (a node without tasks)
        return;
      }
      await this.loadTasks();
    }
    if (room.roomId === this.currentRoomId) this.tasks.show(room, answer);
  }

  showSeen(room) {
    (this.seenLoad ||= Promise.all([import("./receipts.js"), loadStyle("receipts.css")]).then(([m]) => (this.seen = new m.Seen(this)))).then((s) => s.show(room));
  }

  loadTasks() {
    this.tasksLoad ||= Promise.all([import("./tasks.js"), loadStyle("tasks.css")]).then(([module]) => {
      this.tasks ||= new module.RoomTasks(this);
      return this.tasks;
    });
    return this.tasksLoad;
  }

  onTask(event) {
    if (this.tasks) return this.tasks.onEvent(event);
    // the first task seen: the module reads the open room's tasks (no probe)
    const task = event.task;
    if (!task || task.roomId !== this.currentRoomId || !/^(submitted|working|input-required)$/.test(task.state)) return;
    const room = this.store.rooms.get(task.roomId);
    this.loadTasks().then((tasks) => {
      if (room.roomId === this.currentRoomId && tasks.roomId !== room.roomId) tasks.show(room);
    });
  }

  onError(event) {
    if (event.code === "forbidden") this.refreshMe();
    if (event.code === "replay_truncated") {
      for (const room of this.store.rooms.values()) if (room.roomId !== this.currentRoomId) room.forgetMessages();
      const current = this.store.rooms.get(this.currentRoomId);
      if (current) this.loadNewest(current);
      this.refreshStatus();
      return;
    }
    // typing and read marks are best effort; session-ending errors close the socket
    if (event.frame === "typing" || event.frame === "mark_read" || !event.frame) return;
    toast(event.message);
  }

  async onMessage(message) {
    const { store } = this;
    let room = store.rooms.get(message.roomId);
    if (!room) room = await this.fetchRoom(message.roomId);
    if (!room) return;
    if (!store.participant(message.senderId)) this.ensureParticipant(message.senderId);
    const mine = message.senderId === store.me.participantId;
    if (room.isDm && room.hidden) {
      room.hidden = false; // a new message brings a hidden DM back
    }
    this.stopTyping(room.roomId, message.senderId);
    const fresh = this.putMessage(room, message);
    if (fresh && message.threadId) this.countReply(room, message.threadId, 1, message.timestamp);
    if (fresh && !mine) {
      if (this.isVisible(room) && this.timeline.stuck && !room.hasNewer) this.markVisibleRead();
      else store.countUnread(room, message);
      if (this.notifier) this.notifier.consider(room, message);
    }
    this.renderCounts();
  }

  /** Keep a message the node gave us (event or page) and show it. */
  putMessage(room, message) {
    if (message.clientId && message.senderId === this.store.me.participantId) {
      this.outbox.confirm(message.clientId);
    }
    if (!room.loaded && room.roomId !== this.currentRoomId) {
      return !room.messages.has(message.messageId);
    }
    let fresh;
    if (room.hasNewer && !room.messages.has(message.messageId)) {
      // shown away from its newest (a jump): kept until the newer pages are in
      fresh = !room.held.some((m) => m.messageId === message.messageId);
      room.hold(message, HELD_MAX);
    } else {
      fresh = room.put(message);
      if (room.roomId === this.currentRoomId) this.timeline.upsert(message);
    }
    // the thread panel shows held messages too (Timeline.messages)
    if (
      room.roomId === this.threadRoomId &&
      (message.threadId === this.threadRootId || message.messageId === this.threadRootId)
    ) {
      if (message.messageId === this.threadRootId) this.thread.renderRoot();
      else this.thread.timeline.upsert(message);
    }
    return fresh;
  }

  onMessageChange(event) {
    const room = this.store.rooms.get(event.roomId);
    if (!room) return;
    const message = room.find(event.messageId);
    if (event.type === "message_deleted") {
      if (message && message.threadId) this.countReply(room, message.threadId, -1);
      room.drop(event.messageId);
      room.held = room.held.filter((m) => m.messageId !== event.messageId);
      if (room.roomId === this.currentRoomId) this.timeline.remove(event.messageId);
      if (room.roomId === this.threadRoomId) {
        this.thread.timeline.remove(event.messageId);
        if (event.messageId === this.threadRootId) this.thread.renderRoot();
      }
      return;
    }
    if (!message) return;
    let updated;
    if (event.type === "message_edited") {
      updated = { ...message, content: event.content, editedAt: event.editedAt };
    } else {
      const reactions = message.reactions.map((r) => ({ ...r, participantIds: [...r.participantIds] }));
      let entry = reactions.find((r) => r.emoji === event.emoji);
      if (event.type === "reaction_added") {
        if (!entry) {
          entry = { emoji: event.emoji, count: 0, participantIds: [] };
          reactions.push(entry);
        }
        if (!entry.participantIds.includes(event.participantId)) entry.participantIds.push(event.participantId);
      } else if (entry) {
        entry.participantIds = entry.participantIds.filter((id) => id !== event.participantId);
      }
      for (const r of reactions) r.count = r.participantIds.length;
      updated = { ...message, reactions: reactions.filter((r) => r.count > 0) };
    }
    this.putMessage(room, updated);
  }

  async onMembership(event) {
    const { store } = this;
    const who = event.participant;
    const known = store.participant(who.participantId);
    store.participants.set(who.participantId, { ...known, ...who });
    const mine = who.participantId === store.me.participantId;
    let room = store.rooms.get(event.roomId);
    // the node said where one stands: a leave still awaiting its answer keeps out of it
    if (mine && room) room.membershipTold = (room.membershipTold || 0) + 1;
    if (event.type === "participant_joined") {
      if (mine) {
        if (!room) room = await this.fetchRoom(event.roomId);
        else if (!room.joined) {
          room.joined = true;
          room.muted = false; // (none kept from before leaving)
        }
        if (room && room.isDm) room.hidden = false;
      }
      if (room && room.members && !room.members.some((m) => m.participantId === who.participantId)) {
        room.members.push(who);
        room.memberCount = room.members.length;
      }
    } else if (room) {
      if (room.members) {
        room.members = room.members.filter((m) => m.participantId !== who.participantId);
        room.memberCount = room.members.length;
      }
      if (mine && !room.isDm) {
        room.joined = false;
        room.muted = false; // the node forgets a mute on leaving
        room.forgetMessages();
        if (room.roomId === this.currentRoomId) this.showWelcome(`You left ${room.name}.`);
        if (room.roomId === this.threadRoomId) this.closeThread();
      }
    }
    if (room && room.roomId === this.currentRoomId) this.renderRoomHeader(room);
    this.sidebar.render();
    this.renderTitle();
  }

  onTyping(event) {
    if (event.participantId === this.store.me.participantId) return;
    let seen = this.typingSeen.get(event.roomId);
    if (!seen) this.typingSeen.set(event.roomId, (seen = new Map()));
    seen.set(event.participantId, Date.now() + TYPING_SHOWN);
    if (!this.store.participant(event.participantId)) this.ensureParticipant(event.participantId);
    this.renderTyping();
  }

  stopTyping(roomId, participantId) {
    const seen = this.typingSeen.get(roomId);
    if (seen && seen.delete(participantId)) this.renderTyping();
  }

  renderTyping() {
    clearTimeout(this.typingTimer);
    const seen = this.typingSeen.get(this.currentRoomId);
    const now = Date.now();
    const names = [];
    if (seen) {
      for (const [id, until] of seen) {
        if (until < now) seen.delete(id);
        else names.push(this.store.nameOf(id));
      }
    }
    let text = "";
    if (names.length === 1) text = `${names[0]} is typing…`;
    else if (names.length === 2) text = `${names[0]} and ${names[1]} are typing…`;
    else if (names.length > 2) text = "Several people are typing…";
    $("typing").textContent = text;
    if (names.length) this.typingTimer = setTimeout(() => this.renderTyping(), 1000);
  }

  // rooms ---------------------------------------------------------------------------

  /** Keep a room object the node answered with (REST). */
  rememberRoom(data) {
    let room = this.store.rooms.get(data.roomId);
    if (room) room.update(data);
    else {
      room = new Room(data);
      this.store.rooms.set(room.roomId, room);
    }
    return room;
  }

  async fetchRoom(roomId) {
    try {
      const data = await this.api.get(`/api/rooms/${encodeURIComponent(roomId)}`);
      if (data.kind === "dm" && data.name == "dm") {
        const other = data.members.find((m) => m.participantId !== this.store.me.participantId);
        data.with = other ? other.participantId : null;
        for (const m of data.members) if (!this.store.participant(m.participantId)) this.store.participants.set(m.participantId, m);
      }
      const room = this.rememberRoom(data);
      room.permissions = data.permissions;
      room.members = data.members;
      this.sidebar.render();
      return room;
    } catch {
      return null;
    }
  }

  async ensureParticipant(participantId) {
    if (!this.pendingParticipants) this.pendingParticipants = new Set();
    if (this.pendingParticipants.has(participantId)) return;
    this.pendingParticipants.add(participantId);
    try {
      const p = await this.api.get(`/api/participants/${encodeURIComponent(participantId)}`);
      this.store.participants.set(p.participantId, p);
      this.timeline.renderAll();
      this.sidebar.renderPeople();
    } catch {
      // shown by name only
    }
  }

  /** What the person may do in *room*: the room's own answer when loaded,
   * else the mesh-wide one. */
  roomCan(room, permission) {
    if (room && room.permissions) return room.permissions.includes(permission);
    return this.store.can(permission);
  }

  go(roomId) {
    const hash = `#room/${roomId}`;
    if (location.hash === hash) this.route();
    else location.hash = hash;
  }

  route() {
    if (!this.store.me || !this.live) return;
    const address = /^#([a-z]+)(?:\/(.*))?$/.exec(location.hash);
    const view = address && VIEWS.find((v) => v.id === address[1]);
    const load = ++this.panelLoads;
    if (view && offered(view, this.store)) return this.openView(view, address[2] ? safeDecode(address[2]) : "", load);
    this.leavePanel();
    const match = /^#room\/([0-9A-Z]{26})(?:\/message\/([^/]+))?$/.exec(location.hash);
    const { store } = this;
    if (match) {
      const target = match[2] ? safeDecode(match[2]) : null;
      const room = store.rooms.get(match[1]);
      if (!room) return this.act("routeToUnknown", match[1], target, load);
      if (room.joined) {
        if (room.isDm && room.hidden) this.unhideDm(room);
        return this.openRoom(room, target);
      }
      if (!room.isDm) return this.showWelcome("", room);
      history.replaceState(null, "", location.pathname);
    }
    return this.openDefault();
  }

  /** The default room (or the first one joined), else the welcome view. */
  openDefault() {
    const { store } = this;
    const joined = store.joinedRooms();
    const preferred = joined.find((r) => r.roomId === store.status.defaultRoomId) || joined[0];
    if (preferred) {
      history.replaceState(null, "", `#room/${preferred.roomId}`);
      return this.openRoom(preferred);
    }
    return this.showWelcome();
  }

  /** The welcome view (welcome.js): no room open, the default room (or
   * *offer*, a room the person followed a link to) offered. */
  showWelcome(notice = "", offer = null) {
    this.leavePanel();
    this.leaveRoomView();
    this.currentRoomId = null;
    if (this.tasks) this.tasks.hide();
    $("room-view").hidden = true;
    this.closeThread();
    this.sidebar.render();
    this.renderTitle();
    const shown = (this.welcomes = (this.welcomes || 0) + 1);
    // (unless a room or a view was opened meanwhile)
    const still = () => shown === this.welcomes && this.currentRoomId === null && $("panel-view").hidden;
    this.later("welcome.js", "showWelcome", still, notice, offer);
  }

  /** Call *name*(app, ...args) of the lazily loaded module *file* (when
   * *when*, if given, still holds once it is in). */
  later(file, name, when, ...args) {
    return import(`./${file}`).then(
      (module) => (!when || when()) && this.store.me && module[name](this, ...args),
      (error) => toast(`This part of the page could not be loaded: ${error.message}`),
    );
  }

  /** Hide the welcome view (when it was ever made). */
  hideWelcome() {
    const welcome = $("welcome");
    if (welcome) welcome.hidden = true;
  }

  // joining, leaving, hiding, muting… (actions.js, fetched on first use)

  async act(name, ...args) {
    const module = await import("./actions.js");
    return module[name](this, ...args);
  }

  joinRoom(roomId) {
    return this.act("joinRoom", roomId);
  }

  leaveRoom(roomId) {
    return this.act("leaveRoom", roomId);
  }

  deleteRoom(roomId, name) {
    return this.act("deleteRoom", roomId, name);
  }

  openDm(participantId) {
    return this.act("openDm", participantId);
  }

  hideDm(roomId) {
    return this.act("hideDm", roomId);
  }

  toggleMute(roomId) {
    return this.act("toggleMute", roomId);
  }

  markAllRead() {
    return this.act("markAllRead");
  }

  /** Bring a hidden DM back to the list, here and on the node (as opening it
   * from People does); best effort. */
  unhideDm(room) {
    room.hidden = false;
    if (room.with && this.store.can("dms.create")) {
      this.api.post("/api/dms", { participantId: room.with }).catch(() => {});
    }
    this.sidebar.renderDms();
  }

  /** Open *room*; with *target* (a message id), that message in context:
   * scrolled to and highlighted, with older and newer pages around it. */
  openRoom(room, target = null) {
    this.leavePanel();
    const changed = this.currentRoomId !== room.roomId;
    if (changed) this.leaveRoomView();
    this.currentRoomId = room.roomId;
    this.jumps = (this.jumps || 0) + 1; // a newer route drops an older jump's answer
    // a message not loaded: its page replaces what the room shows; until it
    // is in, nothing is shown nor marked read, and live messages are held
    const away = Boolean(target) && !(room.loaded && room.messages.has(target));
    if (away) {
      room.forgetMessages();
      room.hasNewer = true;
    }
    this.hideWelcome();
    $("room-view").hidden = false;
    this.renderRoomHeader(room);
    if (changed) {
      // (not the room a sign-in opens by itself: the rooms list may have
      // been opened meanwhile, and stays as one left it)
      if (this.roomShown) this.toggleNav(false);
      this.roomShown = true;
      this.composer.setTarget(room);
      this.timeline.show(room);
      // unread messages: shown from the first (unread.js); else where one was
      // (a room never read, as one just joined, opens at its newest)
      room.unreadFrom = room.unread && !target && room.joined && room.markedRead !== "0" ? room.markedRead : null;
      if (room.unreadFrom) {
        this.timeline.stuck = false;
        this.withUnread((unread) => room.loaded && unread.settle(room));
      } else if (room.scrollAt !== undefined && room.loaded) {
        $("timeline").scrollTop = room.scrollAt;
        this.timeline.stuck = this.timeline.atBottom();
      }
      this.showTasks(room);
      if (room.isDm || this.seen) this.showSeen(room);
      this.renderTyping();
      if (this.threadRoomId && this.threadRoomId !== room.roomId) this.closeThread();
    }
    if (away) {
      this.timeline.setTarget(null);
      this.timeline.renderAll();
      this.loadAround(room, target);
    } else if (target) {
      this.highlight(target);
    } else {
      this.timeline.setTarget(null);
      // shown around an older message: opening the room shows its newest
      if (room.hasNewer) this.showNewest(room);
      // (a page around the read position moves it not: docs/rest.md)
      else if (!room.loaded && room.unreadFrom) this.loadAround(room, room.unreadFrom, true);
      else if (!room.loaded) this.loadNewest(room);
    }
    if (!room.permissions) this.loadRoomDetails(room);
    this.sidebar.render();
    this.renderTitle();
    this.markVisibleRead();
    if (changed && !target) this.composer.focus();
  }

  /** The open room is left: where one was in it is kept (in memory), and
   * marks held back go out. */
  leaveRoomView() {
    this.flushReads();
    const room = this.store.rooms.get(this.currentRoomId);
    if (room) {
      room.scrollAt = this.timeline.stuck ? undefined : $("timeline").scrollTop;
      room.unreadFrom = null;
    }
  }

  /** unread.js and its styles, once; then *fn*(the Unread). */
  withUnread(fn) {
    this.unreadLoad ||= Promise.all([import("./unread.js"), loadStyle("unread.css")]).then(([module]) => (this.unread = new module.Unread(this)));
    this.unreadLoad.then(fn, (error) => toast(`This part of the page could not be loaded: ${error.message}`));
  }

  /** Open a message in its room (a search result, a notification). */
  openMessage(roomId, messageId) {
    const hash = `#room/${roomId}/message/${encodeURIComponent(messageId)}`;
    if (location.hash === hash) this.route();
    else location.hash = hash;
  }

  /** Show the loaded message *messageId* of the open room: scrolled to the
   * middle, marked (aria-current) and focused, so a screen reader reads it. */
  highlight(messageId) {
    this.timeline.setTarget(messageId);
    const el = this.timeline.views.get(messageId);
    if (!el) return;
    el.scrollIntoView({ block: "center" });
    this.timeline.stuck = this.timeline.atBottom();
    el.focus({ preventScroll: true });
  }

  /** Load the page around *messageId* (GET ...?around=) in place of what the
   * room holds, then the newer pages up to the newest as the person scrolls. */
  async loadAround(room, messageId, unread = false) {
    const jump = this.jumps;
    this.timeline.status(unread ? "Loading messages…" : "Loading the message…");
    let page;
    try {
      page = await this.api.get(
        `/api/rooms/${encodeURIComponent(room.roomId)}/messages?around=${encodeURIComponent(messageId)}&limit=${PAGE}`,
      );
      if (!unread && !page.some((m) => m.messageId === messageId)) {
        throw Object.assign(new Error("That message is not in this conversation any more."), { code: "message_not_found" });
      }
    } catch (error) {
      if (jump !== this.jumps || room.roomId !== this.currentRoomId) return;
      if (unread) return this.showNewest(room);
      // deleted, or of another room: the node does not know it as a cursor here
      const gone =
        error.code === "message_not_found" || error.status === 404 || (error.status === 400 && error.code === "invalid_cursor");
      toast(gone ? "This message could not be found; it may have been deleted." : `The message could not be loaded: ${error.message}`);
      history.replaceState(null, "", `#room/${room.roomId}`);
      this.showNewest(room);
      this.composer.focus();
      return;
    }
    if (jump !== this.jumps || room.roomId !== this.currentRoomId) return;
    // (live messages that came meanwhile stay held: they are newer)
    const held = room.held;
    room.forgetMessages();
    room.held = held;
    for (const m of page) {
      room.put(m);
      if (!this.store.participant(m.senderId)) this.ensureParticipant(m.senderId);
    }
    room.loaded = true;
    room.hasOlder = true; // the first page before it says
    room.hasNewer = true; // the next page says
    this.timeline.status("");
    this.timeline.setTarget(unread ? null : messageId);
    this.timeline.renderAll();
    if (room.roomId === this.threadRoomId) this.thread.load(); // its messages were forgotten
    // the first unread: the newer pages come as one scrolls (each moves the read position)
    if (unread) return this.withUnread((u) => jump === this.jumps && u.settle(room));
    this.highlight(messageId);
    await this.loadNewer(room);
    if (jump === this.jumps) this.fillViewport();
  }

  /** The next page after the newest loaded message of a room shown away from
   * its newest; the last one joins it to the live messages. */
  async loadNewer(room) {
    if (!room.hasNewer || room.loadingNewer || !room.loaded) return;
    room.loadingNewer = true;
    this.timeline.status("Loading newer messages…");
    const since = room.newestCursor;
    let page;
    try {
      page = await this.api.get(
        `/api/rooms/${encodeURIComponent(room.roomId)}/messages?limit=${PAGE}&since=${since}`,
      );
    } catch (error) {
      if (room.roomId === this.currentRoomId) this.timeline.status(`Newer messages could not be loaded: ${error.message}`);
      return;
    } finally {
      room.loadingNewer = false;
    }
    if (!room.hasNewer || room.newestCursor !== since) return; // another jump meanwhile
    for (const m of page) room.put(m);
    if (page.length < PAGE) {
      room.hasNewer = false;
      const newest = room.newestCursor;
      // the page is fresher than what was held up to it (edits, deletes)
      for (const m of room.held) {
        if (!newest || cursorCompare(m.cursor, newest) > 0) room.put(m);
      }
      room.held = [];
      if (room.newestCursor) this.live.noteCursor(room.newestCursor);
    }
    if (room.roomId !== this.currentRoomId) return;
    this.timeline.status(room.hasOlder ? "" : "This is the beginning of the conversation.");
    const s = $("timeline");
    const top = s.scrollTop;
    this.timeline.renderAll();
    s.scrollTop = top;
    this.timeline.stuck = this.timeline.atBottom();
    this.markVisibleRead();
  }

  /** Leave a jump: show the room's newest messages (and follow live ones). */
  showNewest(room) {
    this.jumps = (this.jumps || 0) + 1; // an older jump's answer is dropped
    room.forgetMessages();
    if (room.roomId === this.currentRoomId) {
      this.timeline.setTarget(null);
      this.timeline.renderAll();
      this.timeline.scrollToBottom();
    }
    this.loadNewest(room);
    if (room.roomId === this.threadRoomId) this.thread.load(); // its messages were forgotten
  }

  renderRoomHeader(room) {
    const { store } = this;
    if (room.isDm) {
      const other = store.participant(room.with);
      fill($("room-title"), "Direct messages with ", bdi(store.roomLabel(room)));
      $("room-meta").textContent = other ? (other.online ? "online" : "offline") : "";
    } else {
      fill($("room-title"), "#", bdi(room.name));
      const count = room.memberCount === undefined ? "" : `${room.memberCount} member${room.memberCount === 1 ? "" : "s"}`;
      $("room-meta").replaceChildren(
        count,
        room.description ? " · " : "",
        room.description ? h("span", { dir: "auto", text: room.description }) : "",
      );
    }
    const mute = $("mute-room");
    mute.hidden = !room.joined;
    mute.textContent = room.isDm ? "Mute conversation" : "Mute room";
    mute.setAttribute("aria-pressed", room.muted ? "true" : "false");
    mute.title = room.muted
      ? "Muted: unread messages are counted, but you are told only when you are mentioned"
      : "Count unread messages here, but tell me only when I am mentioned";
    $("room-threads").hidden = !room.joined;
    $("leave-room").hidden = room.isDm;
    $("hide-dm").hidden = !room.isDm;
    roomTools(this, room);
  }

  async loadRoomDetails(room) {
    try {
      const data = await this.api.get(`/api/rooms/${encodeURIComponent(room.roomId)}`);
      room.update(data);
      room.permissions = data.permissions;
      room.members = data.members;
      for (const m of data.members) {
        if (!this.store.participant(m.participantId)) this.store.participants.set(m.participantId, m);
      }
    } catch {
      return;
    }
    if (room.roomId === this.currentRoomId) {
      this.renderRoomHeader(room);
      this.composer.refreshPermission();
      this.timeline.renderAll();
    }
    if (room.roomId === this.threadRoomId) this.thread.composer.refreshPermission();
  }

  /** Fetch the newest page of a room and merge it with what is loaded: what
   * the page covers is replaced (edits, deletes and reactions included). */
  async loadNewest(room) {
    if (room.loadingNewest || room.hasNewer) return; // (a jump: its newer pages come by scrolling)
    room.loadingNewest = true;
    const first = !room.loaded;
    if (first && room.roomId === this.currentRoomId) this.timeline.status("Loading messages…");
    try {
      const page = await this.api.get(`/api/rooms/${encodeURIComponent(room.roomId)}/messages?limit=${PAGE}`);
      if (room.hasNewer) return; // a jump came meanwhile: it holds the room now
      // the page shows every message of the room in [lower, upper] as it is
      // now: one loaded here but not in it was deleted meanwhile
      const snapshotAt = BigInt(this.snapshotCursor || "0");
      const newest = page.length ? BigInt(page[page.length - 1].cursor) : 0n;
      const upper = newest > snapshotAt ? newest : snapshotAt;
      const lower = page.length === PAGE ? BigInt(page[0].cursor) : 0n;
      const ids = new Set(page.map((m) => m.messageId));
      for (const m of room.sorted) {
        const at = BigInt(m.cursor);
        if (at >= lower && at <= upper && !ids.has(m.messageId)) room.drop(m.messageId);
      }
      for (const m of page) {
        if (m.clientId && m.senderId === this.store.me.participantId) this.outbox.confirm(m.clientId);
        room.put(m);
        if (!this.store.participant(m.senderId)) this.ensureParticipant(m.senderId);
      }
      if (first) room.hasOlder = page.length === PAGE;
      room.loaded = true;
      if (page.length) this.live.noteCursor(page[page.length - 1].cursor);
    } catch (error) {
      if (room.roomId === this.currentRoomId) this.timeline.status(`Messages could not be loaded: ${error.message}`);
      return;
    } finally {
      room.loadingNewest = false;
    }
    if (room.roomId === this.currentRoomId) {
      this.timeline.status(room.hasOlder ? "" : "This is the beginning of the conversation.");
      const stick = this.timeline.stuck;
      this.timeline.renderAll();
      if (first && room.unreadFrom) {
        if (this.unread) this.unread.settle(room);
      } else if (stick || first) this.timeline.scrollToBottom();
      this.fillViewport();
      this.markVisibleRead();
    }
  }

  /** Load older messages when the person scrolls near the top. */
  async loadOlder(timeline) {
    if (this.thread && timeline === this.thread.timeline) return this.thread.loadOlder();
    const room = this.store.rooms.get(this.currentRoomId);
    if (!room || !room.loaded || !room.hasOlder || room.loadingOlder) return;
    room.loadingOlder = true;
    this.timeline.status("Loading older messages…");
    try {
      const before = room.oldestCursor;
      const page = await this.api.get(
        `/api/rooms/${encodeURIComponent(room.roomId)}/messages?limit=${PAGE}&before=${before}`,
      );
      if (room.oldestCursor !== before) return; // a jump meanwhile: not next to what is shown
      for (const m of page) room.put(m);
      room.hasOlder = page.length === PAGE;
    } catch (error) {
      this.timeline.status(`Older messages could not be loaded: ${error.message}`);
      return;
    } finally {
      room.loadingOlder = false;
    }
    if (room.roomId !== this.currentRoomId) return;
    this.timeline.status(room.hasOlder ? "" : "This is the beginning of the conversation.");
    this.timeline.renderKeepingPosition();
    this.fillViewport();
  }

  /** Until the timeline can scroll, there is nothing to scroll up to: load more. */
  fillViewport() {
    const room = this.store.rooms.get(this.currentRoomId);
    const s = $("timeline");
    if (room && room.hasOlder && s.scrollHeight <= s.clientHeight + 10) {
      setTimeout(() => this.loadOlder(this.timeline), 0);
    }
  }

  isVisible(room) {
    return room.roomId === this.currentRoomId && document.visibilityState === "visible";
  }

  /** The person sees the newest messages of the open room: mark them read
   * (`mark_read`, at most once a second; what is seen in the meantime is
   * sent when the second is up, or at once when the person leaves the room). */
  markVisibleRead() {
    const room = this.store.rooms.get(this.currentRoomId);
    if (!room || !room.joined || room.hasNewer || !this.isVisible(room) || !this.timeline.stuck) return;
    const newest = room.newestCursor;
    const pendingCount = room.unread || room.mentions;
    if (!newest || (BigInt(newest) <= BigInt(room.markedRead) && !pendingCount)) return;
    room.unread = 0;
    room.mentions = 0;
    if (BigInt(newest) > BigInt(room.seenCursor)) room.seenCursor = newest;
    this.renderCounts();
    if (BigInt(newest) <= BigInt(room.markedRead)) return;
    const now = Date.now();
    if (now < this.readDue) {
      clearTimeout(this.readTimer);
      this.readTimer = setTimeout(() => this.markVisibleRead(), this.readDue - now);
      return;
    }
    if (this.sendRead(room)) this.readDue = now + READ_EVERY;
  }

  /** Send `mark_read` up to what the person has seen of a room; false when
   * there is nothing to send or the connection is down. */
  sendRead(room) {
    const seen = room.seenCursor;
    if (BigInt(seen) <= BigInt(room.markedRead)) return false;
    if (!this.live || !this.live.send({ type: "mark_read", roomId: room.roomId, cursor: seen })) return false;
    room.markedRead = seen;
    return true;
  }

  /** Marks held back by the once-a-second limit, or lost with the connection,
   * go out now (the person leaves the room, or the stream is back). */
  flushReads() {
    for (const room of this.store.rooms.values()) if (room.joined) this.sendRead(room);
  }

  renderCounts() {
    this.sidebar.renderRooms();
    this.sidebar.renderDms();
    this.renderTitle();
  }

  // the other views (panels.js) -----------------------------------------------------

  /** The links to the views this person may use (sidebar, "Mesh"). */
  renderPanelLinks() {
    const current = this.currentPanel && this.currentPanel.view;
    const links = VIEWS.filter((view) => this.store.me && offered(view, this.store)).map((view) =>
      h(
        "li",
        {},
        h(
          "a",
          { class: "nav-item", href: `#${view.id}`, "aria-current": view === current ? "page" : null },
          h("span", { class: "nav-name", text: view.title }),
        ),
      ),
    );
    fill($("panel-list"), links);
  }

  /** Open *view* (its code, and view.js that hosts the views, fetched the
   * first time), unless another route came meanwhile (*load* is no longer
   * the latest). */
  async openView(view, arg, load) {
    if (!this.panels.has(view.id)) {
      this.leavePanel();
      this.showViewFrame(view);
      fill($("panel-body"), h("p", { class: "hint", role: "status", text: "Loading…" }));
    }
    try {
      this.viewHost = await import("./view.js");
    } catch (error) {
      if (load === this.panelLoads) {
        fill($("panel-body"), h("p", { class: "error", role: "alert", text: `This view could not be loaded: ${error.message}` }));
      }
      return;
    }
    if (load === this.panelLoads) await this.viewHost.openView(this, view, arg, load);
  }

  showViewFrame(view) {
    this.leaveRoomView();
    this.closeThread();
    this.currentRoomId = null;
    if (this.tasks) this.tasks.hide();
    this.toggleNav(false);
    this.hideWelcome();
    $("room-view").hidden = true;
    $("panel-view").hidden = false;
    $("panel-title").textContent = view.title;
    this.shownView = view; // (its code may still be loading)
    this.renderTitle();
  }

  /** Show *panel* (view.js, loaded: a panel exists). */
  showPanel(panel, arg) {
    this.viewHost.showPanel(this, panel, arg);
  }

  leavePanel() {
    const panel = this.currentPanel;
    const shown = !$("panel-view").hidden;
    this.currentPanel = null;
    this.shownView = null;
    if (panel) {
      try {
        panel.hide(); // while its fields are still there to be cleared
      } catch (error) {
        console.error(error);
      }
      panel.body = null;
    }
    $("panel-view").hidden = true;
    $("panel-body").replaceChildren();
    if (panel || shown) this.renderPanelLinks();
  }

  renderTitle() {
    const { store } = this;
    const total = store.totalUnread();
    const room = store.rooms.get(this.currentRoomId);
    const parts = [];
    if (room) parts.push(room.isDm ? store.roomLabel(room) : `#${room.name}`);
    else if (this.shownView) parts.push(this.shownView.title);
    if (store.status && store.status.meshName) parts.push(store.status.meshName);
    document.title = `${total ? `(${total}) ` : ""}${parts.join(" · ") || "Mesh"}`;
    const icon = total ? "/web/icon-unread.svg" : "/web/icon.svg";
    const link = $("favicon");
    if (link && link.getAttribute("href") !== icon) link.setAttribute("href", icon);
  }

  // messages ------------------------------------------------------------------------

  send(room, { content, to, threadId, attachments }) {
    if (threadId && this.notifier) this.notifier.tookPartNow(room.roomId, threadId);
    if (!threadId && room.hasNewer && room.roomId === this.currentRoomId) {
      // shown away from its newest (a jump): the message goes to the newest, so do we
      history.replaceState(null, "", `#room/${room.roomId}`);
      this.showNewest(room);
    }
    this.outbox.add({ clientId: newClientId(), roomId: room.roomId, content, to, threadId, attachments });
  }

  async post(item) {
    const body = { content: item.content, clientId: item.clientId };
    if (item.to) body.to = item.to;
    if (item.threadId) body.threadId = item.threadId;
    if (item.attachments && item.attachments.length) body.attachments = item.attachments;
    const message = await this.api.post(`/api/rooms/${encodeURIComponent(item.roomId)}/messages`, body);
    // a message the node had before this page's stream began (a send retried
    // after a reload): its event is not coming again, the answer confirms it
    const since = this.live && this.live.since;
    if (since !== null && since !== undefined && BigInt(message.cursor) <= BigInt(since)) {
      const room = this.store.rooms.get(message.roomId);
      this.outbox.confirm(message.clientId);
      if (room) this.putMessage(room, message);
    }
    return message;
  }

  outboxChanged() {
    // too large: never sendable, its text goes back to its box
    for (const item of this.outbox.items.filter((i) => i.status === "failed" && i.code === "content_too_large")) {
      this.outbox.discard(item.clientId);
      this.giveBack(item);
      return;
    }
    if (this.timeline) this.timeline.renderPending();
    if (this.threadRootId) this.thread.timeline.renderPending();
  }

  /** A message the node refused for good: its text back in its composer
   * (a thread's reply waits for its thread to be opened again). */
  giveBack(item) {
    const reason = `Not sent: ${item.error}. Shorten it, or attach the text as a file.`;
    const inThread = item.threadId && this.threadRootId === item.threadId && this.threadRoomId === item.roomId;
    const composer = inThread ? this.thread.composer : this.composer;
    if (composer.room && composer.room.roomId === item.roomId && (inThread || !item.threadId)) {
      composer.giveBack(item.content, reason);
      return;
    }
    if (item.threadId) {
      const key = `${item.roomId} ${item.threadId}`;
      const kept = this.keptReplies.get(key);
      this.keptReplies.set(key, { content: kept ? `${item.content}\n${kept.content}` : item.content, reason });
    } else {
      const draft = this.drafts.get(item.roomId);
      this.drafts.set(item.roomId, draft ? `${item.content}\n${draft}` : item.content);
    }
    toast(item.threadId ? `${reason} It is kept for when you open the thread again.` : reason);
  }

  async editMessage(message, content) {
    const updated = await this.api.patch(
      `/api/rooms/${encodeURIComponent(message.roomId)}/messages/${encodeURIComponent(message.messageId)}`,
      { content },
    );
    const room = this.store.rooms.get(message.roomId);
    if (room) room.keep(updated, HELD_MAX);
    return updated;
  }

  async deleteMessage(message) {
    const { confirmAction } = await import("./dialogs.js");
    const sure = await confirmAction(
      "Delete this message?",
      `“${message.content.slice(0, 120)}${message.content.length > 120 ? "…" : ""}” is deleted for everyone.`,
      "Delete message",
    );
    if (!sure) return;
    try {
      await this.api.delete(
        `/api/rooms/${encodeURIComponent(message.roomId)}/messages/${encodeURIComponent(message.messageId)}`,
      );
    } catch (error) {
      toast(`Not deleted: ${error.message}`);
      return;
    }
    this.onMessageChange({ type: "message_deleted", roomId: message.roomId, messageId: message.messageId });
  }

  async toggleReaction(message, emoji, add) {
    const path = `/api/rooms/${encodeURIComponent(message.roomId)}/messages/${encodeURIComponent(message.messageId)}/reactions`;
    try {
      const updated = add
        ? await this.api.post(path, { emoji })
        : await this.api.delete(`${path}/${encodeURIComponent(emoji)}`);
      const room = this.store.rooms.get(message.roomId);
      if (room && room.find(updated.messageId)) this.putMessage(room, updated);
    } catch (error) {
      toast(`Reaction not saved: ${error.message}`);
    }
  }

  typing(room) {
    const now = Date.now();
    if (now - (this.typingSent.get(room.roomId) || 0) < TYPING_EVERY) return;
    if (this.live && this.live.send({ type: "typing", roomId: room.roomId })) this.typingSent.set(room.roomId, now);
  }

  // threads (thread.js: fetched when a thread first opens) -----------------------------

  get threadRoomId() {
    return this.thread ? this.thread.roomId : null;
  }

  get threadRootId() {
    return this.thread ? this.thread.rootId : null;
  }

  async openThread(roomId, rootId) {
    if (!this.thread) {
      try {
        const [module] = await Promise.all([import("./thread.js"), loadStyle("thread.css")]);
        this.thread ||= new module.ThreadPane(this);
      } catch (error) {
        toast(`The thread could not be loaded: ${error.message}`);
        return;
      }
    }
    await this.thread.open(roomId, rootId);
  }

  closeThread(returnFocus = false) {
    if (this.thread) this.thread.close(returnFocus);
  }

  /** The open room's threads (threads.js), fetched on first use. */
  async showThreads() {
    const room = this.store.rooms.get(this.currentRoomId);
    if (!room) return;
    try {
      const [module] = await Promise.all([import("./threads.js"), loadStyle("thread.css")]);
      this.threadList ||= new module.ThreadList(this);
    } catch (error) {
      toast(`The threads could not be loaded: ${error.message}`);
      return;
    }
    if (room.roomId === this.currentRoomId) this.threadList.open(room);
  }

  /** Under a thread's root in the room: its reply count (a button that
   * opens the thread) and when the newest reply came. */
  threadSummary(message) {
    const n = message.threadReplies;
    if (!n || message.threadId) return null;
    const at = message.lastReplyAt;
    return h(
      "p",
      { class: "thread-summary" },
      h("button", {
        type: "button",
        class: "link",
        text: `${n} repl${n === 1 ? "y" : "ies"}`,
        on: { click: () => this.openThread(message.roomId, message.messageId) },
      }),
      at ? h("span", { class: "hint" }, " · last reply ", h("time", { datetime: at, title: longTime(at), text: shortTime(at) })) : null,
    );
  }

  /** A reply came (*delta* 1, at *at*) or went (-1): its root's count. */
  countReply(room, rootId, delta, at) {
    const root = room.find(rootId);
    if (!root) return;
    const n = Math.max(0, (root.threadReplies || 0) + delta);
    const updated = { ...root, threadReplies: n, lastReplyAt: delta > 0 && at ? at : root.lastReplyAt };
    if (!n) {
      delete updated.threadReplies;
      delete updated.lastReplyAt;
    }
    this.putMessage(room, updated);
  }
}

new App().boot();
