// Browser notifications (the Notification API) for what needs the person:
// mentions, direct messages, and replies in threads they took part in, while
// the tab is in the background. Off until the person turns them on in their
// settings (the browser asks for permission only then); the choice is kept
// per person in localStorage. Muted rooms and conversations never notify,
// unless the person is mentioned. Fetched when Settings is first opened, or
// at sign-in for a person who turned them on (main.js).

import { $ } from "./dom.js";

const KEY = "mesh.notify.";
const BODY_MAX = 200;
/** how many threads' "took part" answers are kept */
const THREADS_KEPT = 500;

export class Notifier {
  constructor(app) {
    this.app = app;
    this.threads = new Map(); // "roomId/threadId" -> Promise<boolean>
    this.toggle = $("notify-toggle");
    this.toggle.addEventListener("change", () => this.changed());
  }

  get supported() {
    return typeof window.Notification === "function";
  }

  get key() {
    const { me } = this.app.store;
    return me ? KEY + me.participantId : null;
  }

  /** The person turned notifications on here (and the browser allows them). */
  get wanted() {
    const key = this.key;
    return Boolean(key) && localStorage.getItem(key) === "on";
  }

  get active() {
    return this.supported && this.wanted && Notification.permission === "granted";
  }

  /** The settings' checkbox and its line, as things are. */
  render() {
    const status = $("notify-status");
    if (!this.supported) {
      this.toggle.checked = false;
      this.toggle.disabled = true;
      status.textContent = "This browser cannot show notifications.";
      return;
    }
    this.toggle.disabled = false;
    this.toggle.checked = this.wanted && Notification.permission !== "denied";
    if (this.wanted && Notification.permission === "denied") {
      status.textContent = "Your browser blocks notifications from this page: allow them in its site settings.";
    } else if (this.toggle.checked) {
      status.textContent = "Notifications are on.";
    } else {
      status.textContent = "Notifications are off.";
    }
  }

  async changed() {
    const key = this.key;
    if (!key) return;
    if (!this.toggle.checked) {
      localStorage.removeItem(key);
      this.render();
      return;
    }
    localStorage.setItem(key, "on");
    if (this.supported && Notification.permission === "default") {
      try {
        await Notification.requestPermission();
      } catch {
        // an old browser's callback form: the permission is read below
      }
    }
    this.render();
  }

  /** A live message from someone else arrived in *room* (new to the page). */
  async consider(room, message) {
    if (!this.active || document.visibilityState !== "hidden") return;
    const { store } = this.app;
    const me = store.me.participantId;
    if (message.senderId === me) return;
    const mention = store.mentionsMe(message);
    if (room.muted && !mention) return;
    let why = null;
    if (mention) why = "mention";
    else if (room.isDm) why = "dm";
    else if (message.threadId && (await this.tookPart(room, message.threadId))) why = "thread";
    if (!why || !this.active || document.visibilityState !== "hidden") return;
    this.show(room, message, why);
  }

  show(room, message, why) {
    const where = room.isDm ? "" : ` in #${room.name}`;
    const title =
      why === "dm"
        ? `${message.senderName} (${room.memberCount > 2 ? this.app.store.roomLabel(room) : "direct message"})`
        : why === "thread"
          ? `${message.senderName} replied in a thread${where}`
          : `${message.senderName} mentioned you${room.isDm ? "" : where}`;
    let body = message.content || "";
    if (!body && message.attachments && message.attachments.length) body = "(a file)";
    if (body.length > BODY_MAX) body = `${body.slice(0, BODY_MAX)}…`;
    let note;
    try {
      note = new Notification(title, { body, tag: message.messageId, lang: document.documentElement.lang });
    } catch {
      return; // a browser that allows them only from a service worker
    }
    note.addEventListener("click", () => {
      window.focus();
      // (the app's: setting the address it already shows would do nothing)
      this.app.openMessage(room.roomId, message.messageId);
      note.close();
    });
  }

  /** Whether the person started the thread or replied in it: what the page
   * holds first, else the thread's root and newest replies from the node. */
  tookPart(room, threadId) {
    const key = `${room.roomId}/${threadId}`;
    const me = this.app.store.me.participantId;
    const root = room.find(threadId);
    if (root && root.senderId === me) return Promise.resolve(true);
    for (const m of [...room.messages.values(), ...room.held]) {
      if (m.threadId === threadId && m.senderId === me) return Promise.resolve(true);
    }
    if (this.app.outbox.forRoom(room.roomId, threadId).length) return Promise.resolve(true);
    let known = this.threads.get(key);
    if (!known) {
      known = this.ask(room.roomId, threadId);
      this.threads.set(key, known);
      if (this.threads.size > THREADS_KEPT) this.threads.delete(this.threads.keys().next().value);
      // an answer of "no" is asked again next time: the person may reply meanwhile
      known.then((yes) => {
        if (!yes) this.threads.delete(key);
      });
    }
    return known;
  }

  async ask(roomId, threadId) {
    const { api, store } = this.app;
    const me = store.me.participantId;
    const base = `/api/rooms/${encodeURIComponent(roomId)}/messages`;
    try {
      const root = await api.get(`${base}/${encodeURIComponent(threadId)}`);
      if (root && root.senderId === me) return true;
    } catch {
      // a deleted root: its replies may still be the person's
    }
    try {
      const replies = await api.get(`${base}?threadId=${encodeURIComponent(threadId)}&limit=100`);
      return replies.some((m) => m.senderId === me);
    } catch {
      return false;
    }
  }

  /** Forget what was learnt for the person who signs out. */
  forget() {
    this.threads.clear();
  }

  /** The person wrote in a thread: remember it (no need to ask the node). */
  tookPartNow(roomId, threadId) {
    this.threads.set(`${roomId}/${threadId}`, Promise.resolve(true));
  }
}
