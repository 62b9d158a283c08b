// A room's open tasks (docs/agents-mcp-a2a.md#tasks), above the timeline:
// fetched by main.js the first time a room has one; live from task_created /
// task_updated; a task's thread, its creator's answer to a bot that asked
// back, a cancel (its creator, or whoever may command bots).

import { $, bdi, h, toast } from "./dom.js";

const OPEN = new Set(["submitted", "working", "input-required"]);
const STATE_TEXT = { submitted: "submitted", working: "working", "input-required": "needs an answer" };
const ASKS = "input-required";

/** A task's newer version wins (ISO times of one node sort as text). */
const newer = (a, b) => !a || (b.updatedAt || "") >= (a.updatedAt || "");
const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);
const button = (text, label, key, kind, click) =>
  h("button", { type: "button", class: kind ? `small ${kind}` : "small", text, "aria-label": label, dataset: { key }, on: { click } });

export class RoomTasks {
  constructor(app) {
    this.app = app;
    this.count = h("span", { class: "room-tasks-count" });
    this.list = h("ul", { class: "room-tasks-list" });
    this.section = h(
      "section",
      { id: "room-tasks", class: "room-tasks", hidden: true, "aria-labelledby": "room-tasks-title" },
      h("h2", { id: "room-tasks-title", class: "room-tasks-title", tabindex: "-1", text: "Tasks" }),
      this.count,
      this.list,
    );
    this.news = h("p", { class: "sr-only", role: "status" });
    $("timeline").before(this.section, this.news);
    this.roomId = null;
    // roomId -> { tasks: its open ones (taskId -> task), closed: those seen
    // terminal (a late event brings none back), read: the latest read's
    // number, seen: events meanwhile }; dropped with the room
    this.rooms = new Map();
    this.reads = 0;
    this.items = new Map(); // taskId -> its <li>, updated in place
    this.answering = null; // the task whose answer is being written,
    this.form = null; // and its form (kept: its text, caret and focus)
    this.unavailable = false; // the node has no tasks (404)
  }

  room(roomId) {
    if (!this.rooms.has(roomId)) this.rooms.set(roomId, { tasks: null, closed: new Set(), read: 0, seen: null });
    return this.rooms.get(roomId);
  }

  /** The room view shows *room*: what is held, then the node's list, read
   * every time (task events reach members only); *answer*: main.js's read. */
  show(room, answer) {
    for (const id of this.rooms.keys()) if (!this.app.store.rooms.has(id)) this.rooms.delete(id);
    this.roomId = room.roomId;
    this.render();
    this.load(room.roomId, answer);
  }

  hide() {
    this.roomId = null;
    this.section.hidden = true;
    this.news.textContent = "";
  }

  /** Signed out: everything is forgotten. */
  reset() {
    this.hide();
    this.rooms.clear();
    this.items.clear();
    this.list.replaceChildren();
    this.answering = this.form = null;
    this.unavailable = false;
  }

  /** A snapshot after a drop: what was missed is read again. */
  onSnapshot(resumed) {
    if (!resumed) return;
    this.rooms.clear();
    if (this.roomId) this.load(this.roomId);
  }

  async load(roomId, answer) {
    if (this.unavailable) return;
    const room = this.room(roomId);
    const read = (room.read = ++this.reads);
    room.seen = new Map(); // (what was closed before is not in the answer)
    room.closed = new Set();
    try {
      answer ||= await this.app.api.get(`/api/tasks?roomId=${encodeURIComponent(roomId)}&open=true&limit=50`);
    } catch (error) {
      this.unavailable = error.code === "not_found";
      return; // shown without tasks; live events still add them
    }
    if (this.rooms.get(roomId) !== room || room.read !== read) return; // forgotten, or read again
    const tasks = new Map();
    for (const task of [...(answer.tasks || []), ...room.seen.values()]) {
      if (newer(tasks.get(task.taskId), task)) tasks.set(task.taskId, task);
    }
    room.seen = null;
    for (const task of tasks.values()) {
      if (!OPEN.has(task.state) || room.closed.has(task.taskId)) tasks.delete(task.taskId);
      else this.ensureNames(task);
    }
    room.tasks = tasks;
    const asked = tasks.get(this.answering);
    if (asked && asked.state !== ASKS) this.answering = this.form = null;
    if (roomId === this.roomId) this.render();
  }

  onEvent(event) {
    const task = event.task;
    if (!/^task_(created|updated)$/.test(event.type) || !task || !task.roomId) return;
    if (task.roomId === this.roomId) this.announce(task);
    this.apply(task);
  }

  /** Say a change of the open room's tasks to screen readers. */
  announce(task) {
    const known = this.rooms.get(task.roomId);
    const before = known && known.tasks && known.tasks.get(task.taskId);
    const open = OPEN.has(task.state);
    if (before ? before.state === task.state : !open) return;
    const agent = this.app.store.nameOf(task.agentId);
    const title = this.titleOf(task);
    let text = `Task ${task.state}: ${title}`;
    if (!before) text = `New task for ${agent}: ${title}`;
    else if (task.state === ASKS) text = `${agent} asks about ${title}: ${clip(task.statusMessage || "", 200)}`;
    else if (open) text = `${agent} is working on ${title}`;
    this.news.textContent = text;
  }

  /** Keep what the node says of *task* (an event, a reply's or cancel's answer). */
  apply(task) {
    const { roomId, taskId } = task;
    if (!this.rooms.has(roomId) && roomId !== this.roomId) return; // read when the room is shown
    const room = this.room(roomId);
    if (room.seen && newer(room.seen.get(taskId), task)) room.seen.set(taskId, task);
    if (!OPEN.has(task.state)) room.closed.add(taskId);
    room.tasks ||= new Map();
    if (!newer(room.tasks.get(taskId), task)) return;
    if (this.answering === taskId && task.state !== ASKS) this.answering = this.form = null;
    if (room.closed.has(taskId)) room.tasks.delete(taskId);
    else room.tasks.set(taskId, task);
    this.ensureNames(task);
    if (roomId === this.roomId) this.render();
  }

  ensureNames(task) {
    const { app } = this;
    for (const id of [task.agentId, task.creatorId]) {
      // (shown as "someone" until the node says who it is)
      if (id && !app.store.participant(id)) app.ensureParticipant(id).then(() => this.render());
    }
  }

  /** What a task is called: its title, else the start of the request. */
  titleOf(task) {
    const room = this.app.store.rooms.get(task.roomId);
    const request = !task.title && room && room.find ? room.find(task.messageId) : null;
    return clip((task.title || (request ? request.content : "A task")).replace(/\s+/g, " ").trim(), 120);
  }

  /** Draw the open room's tasks, each item updated in place (an answer being
   * written keeps its text, caret and focus); a focus on a button replaced
   * goes to the new one (data-key). */
  render() {
    const room = this.roomId && this.rooms.get(this.roomId);
    const tasks = room && room.tasks ? [...room.tasks.values()].sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1)) : [];
    const active = document.activeElement;
    const inList = this.list.contains(active);
    this.section.hidden = !tasks.length;
    this.count.textContent = `${tasks.length} open`;
    const items = new Map();
    let at = this.list.firstChild;
    for (const task of tasks) {
      const li = this.item(task);
      items.set(task.taskId, li);
      if (li === at) at = at.nextSibling;
      else this.list.insertBefore(li, at);
    }
    while (at) {
      const next = at.nextSibling;
      at.remove();
      at = next;
    }
    this.items = items;
    if (inList && !this.list.contains(active)) {
      const again = this.list.querySelector(`[data-key="${CSS.escape(active.dataset.key || "")}"]`);
      (again || (tasks.length ? $("room-tasks-title") : $("timeline"))).focus();
    }
  }

  item(task) {
    const { store } = this.app;
    const { taskId, state } = task;
    const title = this.titleOf(task);
    const li = this.items.get(taskId) || h("li", { "aria-labelledby": `task-${taskId}` });
    li.className = `task task-${state}`;
    const mine = task.creatorId === store.me.participantId;
    const answering = this.answering === taskId;
    const main = h(
      "div",
      { class: "task-main" },
      h("span", { class: "task-title", id: `task-${taskId}` }, bdi(title)),
      h(
        "span",
        { class: "task-meta" },
        "for ",
        bdi(store.nameOf(task.agentId)),
        " · ",
        h("span", { class: `task-state task-state-${state}`, text: STATE_TEXT[state] || state }),
      ),
      state === ASKS && task.statusMessage ? h("span", { class: "task-status", dir: "auto" }, bdi(task.statusMessage)) : null,
    );
    const actions = h(
      "div",
      { class: "task-actions" },
      button("Thread", `Thread of ${title}`, `thread:${taskId}`, "", () => this.app.openThread(task.roomId, task.messageId)),
      mine && state === ASKS && !answering
        ? button("Answer", `Answer: ${title}`, `answer:${taskId}`, "primary", () => this.startAnswer(task))
        : null,
      mine || store.can("agents.command")
        ? button("Cancel task", `Cancel task: ${title}`, `cancel:${taskId}`, "danger", (e) => this.cancel(task, e.currentTarget))
        : null,
    );
    if (li.firstChild) {
      li.children[0].replaceWith(main);
      li.children[1].replaceWith(actions);
    } else li.append(main, actions);
    const form = answering ? (this.form ||= this.answerForm(task, title)) : null;
    for (const old of li.querySelectorAll(":scope > form")) if (old !== form) old.remove();
    if (form && form.parentNode !== li) li.append(form);
    return li;
  }

  startAnswer(task) {
    this.answering = task.taskId;
    this.form = null;
    this.render();
    if (this.form) this.form.querySelector("input").focus();
  }

  stopAnswer(task) {
    this.answering = this.form = null;
    this.render();
    (this.list.querySelector(`[data-key="${CSS.escape(`answer:${task.taskId}`)}"]`) || $("room-tasks-title")).focus();
  }

  /** The creator's answer to a bot that asked back: posted in the task's
   * thread by the node, and the task is working again. */
  answerForm(task, title) {
    const id = task.taskId;
    const escape = (event) => {
      if (event.key !== "Escape") return;
      event.preventDefault();
      event.stopPropagation();
      this.stopAnswer(task);
    };
    const box = h("input", {
      type: "text",
      class: "task-answer-box",
      autocomplete: "off",
      "aria-label": `Your answer: ${title}`,
      dataset: { key: `draft:${id}` },
      on: { keydown: escape },
    });
    const error = h("p", { class: "error", role: "alert" });
    const send = h("button", { type: "submit", class: "small primary", text: "Send answer", dataset: { key: `send:${id}` } });
    const submit = async (event) => {
      event.preventDefault();
      const content = box.value.trim();
      if (!content) {
        error.textContent = "Write an answer first.";
        return box.focus();
      }
      if (send.getAttribute("aria-disabled")) return;
      send.setAttribute("aria-disabled", "true");
      try {
        const answer = await this.app.api.post(`/api/tasks/${encodeURIComponent(id)}/reply`, { content });
        if (this.answering === id) this.answering = this.form = null;
        this.apply((answer && answer.task) || answer);
        this.render();
        $("room-tasks-title").focus();
      } catch (e) {
        send.removeAttribute("aria-disabled");
        error.textContent = `Not sent: ${e.message}`;
      }
    };
    const close = button("Close", null, `close:${id}`, "", () => this.stopAnswer(task));
    return h("form", { class: "task-answer", novalidate: true, on: { submit } }, box, send, close, error);
  }

  async cancel(task, target) {
    // (not disabled meanwhile: a disabled button drops the focus)
    if (target.getAttribute("aria-disabled")) return;
    target.setAttribute("aria-disabled", "true");
    try {
      const answer = await this.app.api.post(`/api/tasks/${encodeURIComponent(task.taskId)}/cancel`, {});
      this.apply((answer && answer.task) || answer || { ...task, state: "canceled" });
    } catch (error) {
      target.removeAttribute("aria-disabled");
      if (error.code === "task_closed") this.apply({ ...task, state: "canceled" });
      else toast(`The task could not be canceled: ${error.message}`);
    }
  }
}
