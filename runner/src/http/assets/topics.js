// Topics (#/topics): every topic's counts, rates, lateness and costs, live
// from the stream, with the busiest topics' charts; a topic (#/topic/NAME):
// its counts linking to each state's jobs, its charts over the last hours,
// and its actions (pause, resume, retry or purge every dead letter).
"use strict";

const STATES = ["scheduled", "ready", "running", "suspended", "dead", "ended"];

function lateText(t) {
  return t.late_p50_ms == null ? "—" : `${millis(t.late_p50_ms)} / ${millis(t.late_p99_ms)}`;
}

function pauseButton(t, done) {
  const path = `/topics/${enc(t.name)}/`;
  return t.paused
    ? el("button", { class: "resume", onclick: () => act("POST", path + "resume", undefined, done) }, "resume")
    : el("button", { class: "pause", onclick: () => act("POST", path + "pause", undefined, done) }, "pause");
}

function topicRow(t) {
  const r = state.rates.get(t.name);
  const base = `#/topic/${enc(t.name)}`;
  const name = el("td", { class: "name" }, link(base, t.name, { class: "topic" }));
  if (t.paused) name.append(el("span", { class: "badge" }, "paused"));
  const count = (s, n) => (n > 0 ? link(`${base}/${s}`, String(n), { class: s }) : "0");
  return el("tr", { "data-topic": t.name, class: t.paused ? "paused" : "", tabindex: "0" },
    name,
    el("td", { class: "n scheduled" }, count("scheduled", t.scheduled),
      t.suspended ? el("span", { class: "suspended muted", title: "durable jobs that sleep or wait for a signal" }, ` (${t.suspended} suspended)`) : ""),
    el("td", { class: "n ready" }, count("ready", t.ready)),
    el("td", { class: "n running" }, count("running", t.running)),
    el("td", { class: "n dead" }, count("dead", t.dead),
      t.expired ? el("span", { class: "expired muted", title: "jobs not started by their deadline, ever (dead-lettered or dropped)" }, ` (${t.expired} expired)`) : ""),
    el("td", { class: "n done-rate" }, r ? r.done.toFixed(1) : "—"),
    el("td", { class: "n failed-rate" }, r ? r.failed.toFixed(1) : "—"),
    el("td", { class: "n late" }, lateText(t)),
    el("td", { class: "n cpu-rate" }, r ? r.cpu.toFixed(3) : "—"),
    el("td", { class: "n memory" }, t.memory_p99 == null ? "—" : bytes(t.memory_p99)),
    el("td", { class: "actions" }, pauseButton(t),
      t.fairness ? link(`#/tenants/${enc(t.name)}`, "keys", { class: "keys button" }) : "",
      link(`#/rollouts/${enc(t.name)}`, "versions", { class: "versions button" })));
}

views.topics = {
  title: () => "topics",
  filter: "",
  render(p, root) {
    const find = el("input", { id: "filter", type: "search", placeholder: "filter topics ( / )", "aria-label": "filter topics", value: this.filter });
    find.addEventListener("input", () => { this.filter = find.value.trim(); this.draw(); });
    const hours = Number(p.query.get("hours") || 3);
    this.table = table({ id: "topics" }, ["topic", { text: "scheduled", attrs: { class: "n" } },
      { text: "ready", attrs: { class: "n" } }, { text: "running", attrs: { class: "n" } }, { text: "dead", attrs: { class: "n" } },
      { text: "done/s", attrs: { class: "n" } }, { text: "failed/s", attrs: { class: "n" } },
      { text: "late p50 / p99", attrs: { class: "n", title: "from due to start, the starts of the last minute" } },
      { text: "CPU/s", attrs: { class: "n", title: "CPU seconds per second the topic's attempts use (cores busy)" } },
      { text: "memory p99", attrs: { class: "n", title: "99th percentile of recent attempts' peak linear memory" } }, ""], [], "waiting for the first overview…");
    const charts = el("div", { class: "charts", id: "overview-charts" });
    root.append(
      section(null, el("div", { class: "bar" }, el("h2", {}, "Topics"), find), el("div", { class: "scroll" }, this.table)),
      section(`Throughput and lateness, last ${hours} h`, charts,
        el("p", { class: "muted" }, "hours: ", [1, 3, 6, 24].map((n) => [link(`#/topics?hours=${n}`, String(n)), " "]))));
    overviewChart(charts, hours).catch((e) => charts.replaceChildren(el("p", { class: "error" }, e.message)));
    this.draw();
  },
  overview() {
    this.draw();
  },
  draw() {
    if (!state.overview || !this.table) return;
    const focused = document.activeElement && document.activeElement.dataset.topic;
    const rows = topicsNow().filter((t) => !this.filter || t.name.includes(this.filter)).map(topicRow);
    $("tbody", this.table).replaceChildren(...rows);
    if (focused) {
      const again = $(`tr[data-topic="${CSS.escape(focused)}"]`, this.table);
      if (again) again.focus();
    }
  },
};

views.topic = {
  title: (p) => p.topic,
  nav: "topics",
  render(p, root) {
    const hours = Number(p.query.get("hours") || 3);
    this.counts = el("div", { id: "topic-counts" });
    this.head = el("div", { class: "bar" }, el("h2", {}, `Topic ${p.topic}`), el("span", { id: "topic-actions" }));
    const charts = el("div", { class: "charts", id: "topic-charts" });
    root.append(
      section(null, this.head, this.counts),
      section(`History, last ${hours} h`, charts,
        el("p", { class: "muted" }, "hours: ", [1, 3, 6, 24].map((n) => [link(`#/topic/${enc(p.topic)}?hours=${n}`, String(n)), " "]))));
    topicCharts(charts, p.topic, hours).catch((e) => charts.replaceChildren(el("p", { class: "error" }, e.message)));
    this.overview(state.overview, p);
  },
  overview(ov, p) {
    if (!ov || !this.counts) return;
    const t = topicsNow().find((x) => x.name === p.topic);
    if (!t) {
      this.counts.replaceChildren(el("p", { class: "muted" }, `no topic ${p.topic} in the overview`));
      return;
    }
    const base = `#/topic/${enc(t.name)}`;
    const tiles = STATES.map((s) => link(`${base}/${s}`, [el("strong", {}, s === "ended" ? "…" : String(t[s] ?? 0)), el("span", {}, s)], { class: "tile " + s, "data-state": s }));
    const r = state.rates.get(t.name);
    const facts = [
      ["handler", el("code", { title: t.handler || "" }, short(t.handler))],
      ["done/s", r ? r.done.toFixed(1) : "—"], ["failed/s", r ? r.failed.toFixed(1) : "—"],
      ["late p50 / p99", lateText(t)], ["CPU/s", r ? r.cpu.toFixed(3) : "—"],
      ["memory p99", t.memory_p99 == null ? "—" : bytes(t.memory_p99)],
      ["concurrency", t.concurrency ?? "—"], ["max attempts", t.max_attempts ?? "—"],
      ["timeout", millis(t.timeout_ms)], ["expired ever", String(t.expired)],
    ];
    this.counts.replaceChildren(el("div", { class: "tiles" }, tiles),
      el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
    const again = () => rerender();
    const topicPath = `/topics/${enc(t.name)}`;
    $("#topic-actions").replaceChildren(pauseButton(t, again),
      el("button", { class: "retry-all", onclick: () => confirm(`Retry every dead letter of ${t.name}?`) && act("POST", topicPath + "/dead/retry", undefined, again) }, "retry all dead"),
      el("button", { class: "purge-all danger", onclick: () => confirm(`Delete every dead letter of ${t.name} for good?`) && act("DELETE", topicPath + "/dead", undefined, again) }, "purge all dead"),
      link(`#/rollouts/${enc(t.name)}`, "versions", { class: "button" }),
      t.fairness ? link(`#/tenants/${enc(t.name)}`, "keys", { class: "button" }) : "");
  },
};
