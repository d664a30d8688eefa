// Schedules (#/cron): each [[schedule]] of queues.toml with its next fire
// times, how far the runners have enqueued it, and its last fire time's job
// with how that job stands (a link to its page). Read again every 10 s.
"use strict";

views.cron = {
  title: () => "schedules",
  render(p, root) {
    this.box = el("div", { id: "cron-box" }, el("p", { class: "muted" }, "loading…"));
    root.append(section("Schedules", this.box));
    this.draw();
  },
  overview() {
    if (!this.drawnAt || Date.now() - this.drawnAt > 10000) this.draw();
  },
  async draw() {
    this.drawnAt = Date.now();
    try {
      const r = await api("GET", "/schedules?next=3");
      const rows = r.schedules.map((s) => el("tr", { "data-schedule": s.name, tabindex: "0" },
        el("td", {}, el("code", {}, s.name)),
        el("td", {}, link(`#/topic/${enc(s.topic)}`, s.topic)),
        el("td", { class: "when" }, s.cron !== undefined ? [el("code", {}, s.cron), ` (${s.timezone})`] : `every ${span(s.every_ms)}`),
        el("td", {}, s.missed),
        el("td", { class: "next" }, s.next_ms.length
          ? s.next_ms.map((t, i) => [i ? ", " : "", el("span", { title: iso(t) }, when(t))])
          : el("span", { class: "muted" }, "none")),
        el("td", { class: "last" }, s.last
          ? [link(`#/job/${enc(s.topic)}/${enc(s.last.job)}`, s.last.job), " ",
             el("span", { class: s.last.state ? `badge state-${s.last.state}` : "muted" }, s.last.state || "not held (done and not kept, skipped, or before a runner served it)")]
          : el("span", { class: "muted" }, "no runner has served it yet"))));
      this.box.replaceChildren(table({ id: "schedules" }, ["schedule", "topic", "when", "missed", "next fire times", "last fire time's job"],
        rows, "no [[schedule]] in queues.toml"));
    } catch (e) {
      this.box.replaceChildren(el("p", { class: "error" }, e.message));
    }
  },
};
