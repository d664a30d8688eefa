// The dashboard's view of a topic's tenant keys (a topic with fairness):
// the top keys by jobs queued and by CPU of the last minute, the rest as
// "other", each with its weight and a pause / resume button; redrawn with
// every refresh. Loaded after dashboard.js, whose helpers it uses.
"use strict";

let shownKeys = null; // the topic whose keys are on screen

async function openKeys(topic) {
  shownKeys = topic;
  await drawKeys();
  $("#keys-section").scrollIntoView({ behavior: "smooth" });
}

async function drawKeys() {
  const topic = shownKeys;
  const s = await api("GET", `/topics/${enc(topic)}/keys?top=10`);
  $("#keys-section").hidden = false;
  $("#keys-topic").textContent = topic;
  $("#keys-totals").textContent =
    `${s.queued} queued · ${s.running} running · ${s.keys_with_jobs} keys with jobs queued`;
  const ms = (us) => `${(us / 1000).toFixed(1)} ms`;
  const rows = s.top.map((k) => {
    const path = `/topics/${enc(topic)}/keys/${enc(k.key)}`;
    const toggle = k.paused
      ? el("button", { class: "resume", onclick: () => act("POST", path + "/resume") }, "resume")
      : el("button", { class: "pause", onclick: () => act("POST", path + "/pause") }, "pause");
    const name = el("td", { class: "name" }, k.key === "" ? "(no key)" : k.key);
    if (k.paused) name.append(el("span", { class: "badge" }, "paused"));
    return el("tr", { "data-key": k.key, class: k.paused ? "paused" : "" },
      name,
      el("td", { class: "n queued" }, String(k.queued)),
      el("td", { class: "n running" }, String(k.running)),
      el("td", { class: "n cpu" }, ms(k.cpu_us)),
      el("td", { class: "n weight" }, String(k.weight)),
      el("td", {}, k.key === "" ? "" : toggle));
  });
  const sum = (f) => s.top.reduce((n, k) => n + k[f], 0);
  rows.push(el("tr", { "data-key": "(other)", class: "muted" },
    el("td", {}, "other"),
    el("td", { class: "n" }, String(Math.max(0, s.queued - sum("queued")))),
    el("td", { class: "n" }, String(Math.max(0, s.running - sum("running")))),
    el("td", { class: "n" }, ms(Math.max(0, s.cpu_us - sum("cpu_us")))),
    el("td", {}), el("td", {})));
  $("#keys tbody").replaceChildren(...rows);
}
