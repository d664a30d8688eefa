// Flows: the recent ones (#/flows, GET /api/flows) and one flow or batch
// (#/flow/ID) as a graph laid out by dagre, each job a node coloured by its
// state in the layer below the jobs it waits for, live from the stream.
"use strict";

const NODE_W = 190;
const NODE_H = 58;
const MOST_NODES = 400; // beyond this, a batch's jobs are listed, not drawn

views.flows = {
  title: () => "flows",
  render(p, root) {
    const find = el("form", { id: "flow-lookup" },
      el("input", { id: "flow-id", type: "search", placeholder: "flow or batch id", required: true, "aria-label": "flow or batch id" }),
      el("button", { type: "submit" }, "show"));
    find.addEventListener("submit", (e) => { e.preventDefault(); location.hash = `#/flow/${enc($("#flow-id").value.trim())}`; });
    this.list = el("div", { id: "flow-list" }, el("p", { class: "muted" }, "loading…"));
    root.append(section(null, el("div", { class: "bar" }, el("h2", {}, "Recent flows"), find), this.list));
    this.load();
  },
  overview() {
    this.load();
  },
  async load() {
    try {
      const list = await api("GET", "/flows?limit=100");
      const rows = list.flows.map((f) => el("tr", { "data-flow": f.id, tabindex: "0" },
        el("td", {}, link(`#/flow/${enc(f.id)}`, f.id)),
        el("td", { title: iso(f.created_ms) }, ago(f.created_ms)),
        el("td", { class: "n" }, f.jobs == null ? "gone" : String(f.jobs)),
        el("td", { class: "n" }, f.jobs == null ? "" : `${f.ended}/${f.jobs}`),
        el("td", { class: "n" }, f.dead ? el("span", { class: "error" }, String(f.dead)) : "0"),
        el("td", {}, f.cancelled_ms ? `cancelled ${ago(f.cancelled_ms)}` : f.done_ms ? `done ${ago(f.done_ms)}` : "running")));
      this.list.replaceChildren(table({ id: "flows" }, ["flow", "created", { text: "jobs", attrs: { class: "n" } },
        { text: "ended", attrs: { class: "n" } }, { text: "dead", attrs: { class: "n" } }, "state"], rows, "no flow created yet"));
    } catch (e) {
      this.list.replaceChildren(el("p", { class: "error" }, e.message));
    }
  },
};

// depth of each job: 1 + the deepest job it waits for (a batch's callbacks
// wait for every job of it)
function flowLayers(flow) {
  const index = new Map(flow.jobs.map((j, i) => [j.name, i]));
  const depth = new Array(flow.jobs.length).fill(-1);
  const members = flow.jobs.some((j) => !j.callback);
  const of = (i, seen = new Set()) => {
    if (depth[i] >= 0) return depth[i];
    const j = flow.jobs[i];
    if (j.callback) return (depth[i] = members ? 1 : 0);
    seen.add(i);
    let d = 0;
    for (const a of j.after) {
      const p = index.get(a.name);
      if (p !== undefined && !seen.has(p)) d = Math.max(d, of(p, seen) + 1);
    }
    return (depth[i] = d);
  };
  flow.jobs.forEach((_, i) => of(i));
  return depth;
}

function waitsText(j) {
  if (j.callback) return j.callback === "on_success" ? "after every job, if none is dead" : "after every job";
  return j.after.length ? "after " + j.after.map((a) => a.name + (a.policy === "ignore" ? " (ignore)" : "")).join(", ") : "";
}

// the flow's jobs and edges laid out by dagre: {width, height, nodes, edges}
function layout(flow) {
  // eslint-disable-next-line no-undef
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "TB", nodesep: 24, ranksep: 46, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const j of flow.jobs) g.setNode(j.name, { width: NODE_W, height: NODE_H });
  const names = new Set(flow.jobs.map((j) => j.name));
  for (const j of flow.jobs) {
    if (j.callback) {
      for (const m of flow.jobs) if (!m.callback) g.setEdge(m.name, j.name);
    } else {
      for (const a of j.after) if (names.has(a.name)) g.setEdge(a.name, j.name, { ignore: a.policy === "ignore" });
    }
  }
  // eslint-disable-next-line no-undef
  dagre.layout(g);
  const edges = g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points, ignore: g.edge(e).ignore }));
  return { width: g.graph().width, height: g.graph().height, nodes: g, edges };
}

function graphView(flow) {
  const depth = flowLayers(flow);
  const drawn = layout(flow);
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("width", drawn.width);
  svg.setAttribute("height", drawn.height);
  svg.setAttribute("class", "edges");
  const stateOf = new Map(flow.jobs.map((j) => [j.name, j.state]));
  for (const e of drawn.edges) {
    const path = document.createElementNS(svgNs, "path");
    path.setAttribute("d", "M" + e.points.map((pt) => `${pt.x.toFixed(1)},${pt.y.toFixed(1)}`).join(" L"));
    path.setAttribute("class", `edge from-${stateOf.get(e.from)}${e.ignore ? " ignore" : ""}`);
    path.setAttribute("data-edge", `${e.from}->${e.to}`);
    svg.append(path);
  }
  const nodes = flow.jobs.map((j, i) => {
    const n = drawn.nodes.node(j.name);
    return el("a", {
      class: "node state-" + j.state, "data-job": j.name, "data-layer": String(depth[i]),
      href: `#/job/${enc(j.topic)}/${enc(j.id)}`, title: `${j.topic}/${j.id}`,
      style: `left:${n.x - NODE_W / 2}px;top:${n.y - NODE_H / 2}px;width:${NODE_W}px;height:${NODE_H}px`,
    }, el("strong", {}, j.name), " ", el("span", { class: "state" }, j.state),
    el("div", { class: "muted" }, j.topic + (waitsText(j) ? " · " + waitsText(j) : "")));
  });
  return el("div", { class: "graph", style: `width:${drawn.width}px;height:${drawn.height}px` }, svg, nodes);
}

views.flow = {
  title: (p) => `flow ${p.id}`,
  nav: "flows",
  render(p, root) {
    this.p = p;
    this.shown = null;
    this.out = el("div", { id: "flow-graph" }, el("p", { class: "muted" }, "loading…"));
    root.append(section(null, el("div", { class: "bar" }, el("h2", {}, `Flow ${p.id}`), el("span", { id: "flow-actions" })), this.out));
    api("GET", `/flows/${enc(p.id)}`).then((f) => this.show(f)).catch((e) =>
      this.out.replaceChildren(el("p", { class: "error", id: "flow-missing" }, e.message)));
  },
  live: (p) => ({ query: `flow=${enc(p.id)}`, on: { flow: (f) => views.flow.show(f) } }),
  show(flow) {
    if (!this.p) return;
    if (!flow) {
      this.out.replaceChildren(el("p", { class: "error", id: "flow-missing" }, `no flow ${this.p.id} (finished flows are kept 7 days)`));
      return;
    }
    const text = JSON.stringify(flow);
    if (text === this.shown) return;
    this.shown = text;
    const counts = Object.entries(flow.counts).map(([s, n]) => `${n} ${s}`).join(", ");
    const kind = flow.batch ? `batch (${flow.batch})` : "flow";
    const ended = flow.jobs.filter((j) => ["acked", "dead", "cancelled"].includes(j.state)).length;
    const head = el("p", { id: "flow-summary" }, `${kind} ${flow.id}: ${flow.jobs.length} jobs (${counts})`,
      flow.done_at_ms ? `, done ${when(flow.done_at_ms)}` : "",
      flow.cancelled_at_ms ? `, cancelled ${when(flow.cancelled_at_ms)}` : "");
    const bar = el("progress", { id: "flow-progress", max: String(flow.jobs.length), value: String(ended) });
    const failed = flow.jobs.filter((j) => j.state === "dead" || j.reason).map((j) =>
      el("li", { "data-job": j.name }, link(`#/job/${enc(j.topic)}/${enc(j.id)}`, j.name), `: ${j.state}${j.reason ? " — " + j.reason : ""}`));
    const big = flow.jobs.length > MOST_NODES;
    this.out.replaceChildren(head, bar,
      big ? el("p", { class: "muted" }, `${flow.jobs.length} jobs: too many to draw; listed below`) : el("div", { class: "scroll" }, graphView(flow)),
      failed.length ? el("ul", { id: "flow-failures" }, failed) : "",
      big ? table({ id: "flow-jobs" }, ["job", "state", "topic"], flow.jobs.slice(0, 1000).map((j) =>
        el("tr", { "data-job": j.name }, el("td", {}, link(`#/job/${enc(j.topic)}/${enc(j.id)}`, j.name)), el("td", {}, j.state), el("td", {}, j.topic)))) : "");
    $("#flow-actions").replaceChildren(flow.done_at_ms || flow.cancelled_at_ms ? ""
      : el("button", { class: "danger", onclick: () => confirm(`Cancel flow ${flow.id}?`) && act("POST", `/flows/${enc(flow.id)}/cancel`, undefined, () => { this.shown = null; }) }, "cancel flow"));
  },
};
