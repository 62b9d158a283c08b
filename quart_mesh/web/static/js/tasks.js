// A room's open tasks (docs/agents-mcp-a2a.md#tasks): the "Tasks" region of
// the room view, above the timeline (fetched by main.js, with css/tasks.css,
// the first time a room has an open task). It lists the room's tasks that are
// still open (submitted, working, input-required) from
// GET /api/tasks?roomId=&open=true, keeps them live from the `task_created` and `task_updated` events (a task
// leaves the list when it reaches a terminal state), opens a task's thread,
// lets its creator answer a bot that asked back (POST /api/tasks/:id/reply),
// and lets its creator (or whoever may command bots) cancel it.

import { $, bdi, fill, h, toast } from "./dom.js";

const OPEN = new Set(["submitted", "working", "input-required"]);
const STATE_TEXT = {
  submitted: "submitted",
  working: "working",
  "input-required": "needs an answer",
};
const LIMIT = 50; // the most open tasks listed for a room
const TITLE_CHARS = 120;

/** A task's newer version wins (ISO times of one node sort as text). */
function newer(a, b) {
  return !a || (b.updatedAt || "") >= (a.updatedAt || "");
}

export class RoomTasks {
  constructor(app) {
    this.app = app;
    // drawn above the conversation, once (main.js fetches this module the
    // first time a room has an open task)
    this.count = h("span", { class: "room-tasks-count" });
    this.list = h("ul", { class: "room-tasks-list" });
    this.section = h(
      "section",
      { id: "room-tasks", class: "room-tasks", hidden: true, "aria-labelledby": "room-tasks-title" },
      h("h2", { id: "room-tasks-title", class: "room-tasks-title", tabindex: "-1", text: "Tasks" }),
      this.count,
      this.list,
    );
    this.news = h("p", { id: "room-tasks-news", class: "sr-only", role: "status" });
    $("timeline").before(this.section, this.news);
    this.roomId = null;
    this.byRoom = new Map(); // roomId -> Map(taskId -> task), rooms read since the last snapshot
    this.closed = new Set(); // tasks seen terminal (an older list answer may still hold them)
    this.loads = 0;
    this.answering = null; // the task whose answer is being written
    this.draft = ""; // (kept across redraws)
    this.unavailable = false; // the node has no tasks (404): never asked again
  }

  /** The room view shows *room*: its open tasks, read when not held. */
  show(room) {
    this.roomId = room.roomId;
    this.render();
    if (!this.byRoom.has(room.roomId)) this.load(room.roomId);
  }

  /** The room view is left (the welcome view, another view). */
  hide() {
    this.roomId = null;
    this.section.hidden = true;
    this.news.textContent = "";
  }

  /** Signed out: everything is forgotten. */
  reset() {
    this.hide();
    this.byRoom.clear();
    this.closed.clear();
    this.answering = null;
    this.draft = "";
    this.unavailable = false;
  }

  /** A snapshot after a drop: what was missed is read again. */
  onSnapshot(resumed) {
    if (!resumed) return;
    this.byRoom.clear();
    if (this.roomId) this.load(this.roomId);
  }

  async load(roomId) {
    if (this.unavailable) return;
    const load = ++this.loads;
    let answer;
    try {
      answer = await this.app.api.get(`/api/tasks?roomId=${encodeURIComponent(roomId)}&open=true&limit=${LIMIT}`);
    } catch (error) {
      if (error.code === "not_found") this.unavailable = true; // (a node without tasks)
      return; // shown without tasks; live events still add them
    }
    if (load !== this.loads && this.byRoom.has(roomId)) return;
    const held = this.byRoom.get(roomId) || new Map();
    for (const task of (answer && answer.tasks) || []) {
      if (this.closed.has(task.taskId) || !OPEN.has(task.state)) continue;
      if (newer(held.get(task.taskId), task)) held.set(task.taskId, task);
    }
    this.byRoom.set(roomId, held);
    for (const task of held.values()) this.ensureNames(task);
    if (roomId === this.roomId) this.render();
  }

  onEvent(event) {
    if (event.type !== "task_created" && event.type !== "task_updated") return;
    const task = event.task;
    if (!task || !task.roomId) return;
    if (task.roomId === this.roomId) this.announce(task);
    this.apply(task);
  }

  /** Say a change of the open room's tasks to screen readers (the list
   * itself changes silently). */
  announce(task) {
    const held = this.byRoom.get(task.roomId);
    const before = held && held.get(task.taskId);
    if (before && before.state === task.state) return;
    if (!before && !OPEN.has(task.state) && this.closed.has(task.taskId)) return;
    const agent = this.app.store.nameOf(task.agentId);
    const title = this.titleOf(task);
    let text;
    if (!before && OPEN.has(task.state)) text = `New task for ${agent}: ${title}`;
    else if (task.state === "input-required") text = `${agent} asks about ${title}: ${task.statusMessage || ""}`;
    else if (OPEN.has(task.state)) text = `${agent} is working on ${title}`;
    else text = `Task ${task.state}: ${title}`;
    this.news.textContent = text;
  }

  /** Keep what the node says of *task* (an event, a cancel's answer). */
  apply(task) {
    if (!OPEN.has(task.state)) this.closed.add(task.taskId);
    let held = this.byRoom.get(task.roomId);
    if (!held) {
      if (task.roomId !== this.roomId) return; // read when the room is opened
      held = new Map();
      this.byRoom.set(task.roomId, held);
    }
    if (!OPEN.has(task.state)) held.delete(task.taskId);
    if (this.answering === task.taskId && task.state !== "input-required") this.answering = null;
    else if (!this.closed.has(task.taskId) && newer(held.get(task.taskId), task)) held.set(task.taskId, task);
    this.ensureNames(task);
    if (task.roomId === this.roomId) this.render();
  }

  ensureNames(task) {
    const { store } = this.app;
    for (const id of [task.agentId, task.creatorId]) {
      // (shown as "someone" until the node says who it is)
      if (id && !store.participant(id)) this.app.ensureParticipant(id).then(() => this.render());
    }
  }

  /** What a task is called: its title, else the start of the request. */
  titleOf(task) {
    let text = task.title;
    if (!text) {
      const room = this.app.store.rooms.get(task.roomId);
      const request = room && room.find ? room.find(task.messageId) : null;
      text = request ? request.content : "A task";
    }
    text = text.replace(/\s+/g, " ").trim();
    return text.length > TITLE_CHARS ? `${text.slice(0, TITLE_CHARS - 1)}…` : text;
  }

  mayCancel(task) {
    const { store } = this.app;
    return task.creatorId === store.me.participantId || store.can("agents.command");
  }

  render() {
    const held = this.roomId && this.byRoom.get(this.roomId);
    const tasks = held ? [...held.values()].sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1)) : [];
    // the focus stays on its button across a redraw
    const active = document.activeElement;
    const key = active && this.list.contains(active) ? active.dataset.key : null;
    this.section.hidden = tasks.length === 0;
    if (!tasks.length) {
      this.list.replaceChildren();
      if (key) $("timeline").focus();
      return;
    }
    this.count.textContent = `${tasks.length} open`;
    fill(
      this.list,
      tasks.map((task) => this.item(task)),
    );
    if (key) {
      const again = this.list.querySelector(`[data-key="${CSS.escape(key)}"]`);
      (again || this.section.querySelector("h2")).focus();
    }
  }

  item(task) {
    const { store } = this.app;
    const title = this.titleOf(task);
    const titleId = `task-${task.taskId}`;
    const buttons = [
      h("button", {
        type: "button",
        class: "small",
        text: "Thread",
        "aria-label": `Thread of ${title}`,
        dataset: { key: `thread:${task.taskId}` },
        on: { click: () => this.app.openThread(task.roomId, task.messageId) },
      }),
    ];
    const mine = task.creatorId === store.me.participantId;
    if (mine && task.state === "input-required" && this.answering !== task.taskId) {
      buttons.push(
        h("button", {
          type: "button",
          class: "small primary",
          text: "Answer",
          "aria-label": `Answer: ${title}`,
          dataset: { key: `answer:${task.taskId}` },
          on: { click: () => this.startAnswer(task) },
        }),
      );
    }
    if (this.mayCancel(task)) {
      buttons.push(
        h("button", {
          type: "button",
          class: "small danger",
          text: "Cancel task",
          "aria-label": `Cancel task: ${title}`,
          dataset: { key: `cancel:${task.taskId}` },
          on: { click: (event) => this.cancel(task, event.currentTarget) },
        }),
      );
    }
    return h(
      "li",
      { class: `task task-${task.state}`, "aria-labelledby": titleId },
      h(
        "div",
        { class: "task-main" },
        h("span", { class: "task-title", id: titleId }, bdi(title)),
        h(
          "span",
          { class: "task-meta" },
          "for ",
          bdi(store.nameOf(task.agentId)),
          " · ",
          h("span", { class: `task-state task-state-${task.state}`, text: STATE_TEXT[task.state] || task.state }),
        ),
        task.state === "input-required" && task.statusMessage
          ? h("span", { class: "task-status", dir: "auto" }, bdi(task.statusMessage))
          : null,
      ),
      h("div", { class: "task-actions" }, buttons),
      this.answering === task.taskId ? this.answerForm(task, title) : null,
    );
  }

  startAnswer(task) {
    this.answering = task.taskId;
    this.draft = "";
    this.render();
    const box = this.list.querySelector(`[data-key="${CSS.escape(`draft:${task.taskId}`)}"]`);
    if (box) box.focus();
  }

  stopAnswer(task) {
    this.answering = null;
    this.draft = "";
    this.render();
    const again = this.list.querySelector(`[data-key="${CSS.escape(`answer:${task.taskId}`)}"]`);
    (again || $("room-tasks-title")).focus();
  }

  /** The creator's answer to a bot that asked back: posted in the task's
   * thread by the node, and the task is working again. */
  answerForm(task, title) {
    const box = h("input", {
      type: "text",
      class: "task-answer-box",
      autocomplete: "off",
      "aria-label": `Your answer: ${title}`,
      value: this.draft,
      dataset: { key: `draft:${task.taskId}` },
      on: {
        input: (event) => {
          this.draft = event.currentTarget.value;
        },
        keydown: (event) => {
          if (event.key === "Escape") {
            event.preventDefault();
            event.stopPropagation();
            this.stopAnswer(task);
          }
        },
      },
    });
    const error = h("p", { class: "error", role: "alert" });
    const send = h("button", { type: "submit", class: "small primary", text: "Send answer" });
    return h(
      "form",
      {
        class: "task-answer",
        novalidate: true,
        on: {
          submit: async (event) => {
            event.preventDefault();
            const content = box.value.trim();
            if (!content) {
              error.textContent = "Write an answer first.";
              box.focus();
              return;
            }
            send.setAttribute("aria-disabled", "true");
            try {
              const answer = await this.app.api.post(`/api/tasks/${encodeURIComponent(task.taskId)}/reply`, { content });
              this.answering = null;
              this.draft = "";
              this.apply((answer && answer.task) || answer);
              $("room-tasks-title").focus();
            } catch (e) {
              send.removeAttribute("aria-disabled");
              error.textContent = `Not sent: ${e.message}`;
            }
          },
        },
      },
      box,
      send,
      h("button", { type: "button", class: "small", text: "Close", on: { click: () => this.stopAnswer(task) } }),
      error,
    );
  }

  async cancel(task, button) {
    // (not disabled meanwhile: a disabled button drops the focus, which
    // then could not move on when the task leaves the list)
    if (button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true");
    try {
      const answer = await this.app.api.post(`/api/tasks/${encodeURIComponent(task.taskId)}/cancel`, {});
      this.apply((answer && answer.task) || answer || { ...task, state: "canceled" });
    } catch (error) {
      button.removeAttribute("aria-disabled");
      if (error.code === "task_closed") {
        this.apply({ ...task, state: "canceled" });
        return;
      }
      toast(`The task could not be canceled: ${error.message}`);
    }
  }
}
