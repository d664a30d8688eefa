// The dashboard's flow view: a flow (or batch) as layers, each job under the
// deepest of the jobs it waits for, coloured by state, redrawn with every
// refresh while it runs. Loaded after dashboard.js, whose helpers it uses.
"use strict";

let shownFlow = null; // the flow id on screen

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
  const layers = [];
  flow.jobs.forEach((j, i) => (layers[depth[i]] ||= []).push(j));
  return layers;
}

function flowNode(j) {
  const waits = j.callback
    ? (j.callback === "on_success" ? "after every job, if none is dead" : "after every job")
    : j.after.map((a) => a.name + (a.policy === "ignore" ? " (ignore)" : "")).join(", ");
  return el("div", { class: "node state-" + j.state, "data-job": j.name, title: `${j.topic}/${j.id}` },
    el("strong", {}, j.name), " ", el("span", { class: "state" }, j.state),
    el("div", { class: "muted" }, j.topic + (waits ? " · after " + waits.replace(/^after /, "") : "")));
}

async function showFlow(id) {
  shownFlow = id;
  const out = $("#flow-graph");
  try {
    const flow = await api("GET", `/flows/${enc(id)}`);
    const counts = Object.entries(flow.counts).map(([s, n]) => `${n} ${s}`).join(", ");
    const kind = flow.batch ? `batch (${flow.batch})` : "flow";
    const head = el("p", { id: "flow-summary" }, `${kind} ${flow.id}: ${flow.jobs.length} jobs (${counts})`,
      flow.done_at_ms ? `, done ${when(flow.done_at_ms)}` : "",
      flow.cancelled_at_ms ? `, cancelled ${when(flow.cancelled_at_ms)}` : "");
    const layers = flowLayers(flow).map((jobs, i) =>
      el("div", { class: "layer", "data-layer": String(i) }, ...jobs.map(flowNode)));
    out.replaceChildren(head, ...layers);
  } catch (err) {
    out.replaceChildren(el("p", { class: "muted" }, err.message));
  }
}

$("#flow-lookup").addEventListener("submit", async (e) => {
  e.preventDefault();
  await showFlow($("#flow-id").value.trim());
});

// a flow job looked up by id links to its flow
function flowLink(flow) {
  if (!flow) return [];
  return [el("p", { id: "job-flow" }, "in flow ",
    el("a", { class: "flow", onclick: () => { $("#flow-id").value = flow.id; showFlow(flow.id); } }, flow.id))];
}

setInterval(() => { if (shownFlow) showFlow(shownFlow); }, POLL_MS);
