// The hourglass dashboard: reads the JSON API every 2 s and draws it.
// No framework, no build step; every change goes through the same API the
// docs (docs/src/http-api.md) describe.
"use strict";

const POLL_MS = 2000;
const HISTORY = 150; // samples kept per topic: 5 minutes at 2 s
const DEAD_PAGE = 50;

const state = {
  token: localStorage.getItem("hourglass-token") || "",
  filter: "",
  previous: new Map(), // topic -> {at, done, failed}
  history: new Map(), // topic -> [done/s]
  rates: new Map(), // topic -> {done, failed}
  dead: { topic: null, offset: 0 },
  lookup: null, // {topic, id, live}: the job looked up by id
  versions: { topic: null },
  topics: [],
};

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

// `send`, if given, goes as the JSON body
async function api(method, path, send) {
  const headers = {};
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const init = { method, headers };
  if (send !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(send);
  }
  const res = await fetch("/api" + path, init);
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) {
    $("#token-form").hidden = false;
    throw new Error(body.error || "this server needs a token");
  }
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function setStatus(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("error", !!error);
}

// a length of time in words: "40 s", "5 min", "2 h", "3 d"
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  if (s < 86400) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

function ago(ms) {
  return span(Date.now() - ms) + " ago";
}

// a time that may be ahead: "in 5 min" or "5 min ago"
function when(ms) {
  return ms > Date.now() ? "in " + span(ms - Date.now()) : ago(ms);
}

function percent(part, whole) {
  return whole ? (part * 100 / whole).toFixed(1) + "%" : "—";
}

function short(hash) {
  return hash ? hash.slice(0, 12) : "—";
}

function sparkline(values) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 22");
  if (values.length > 1) {
    const max = Math.max(1, ...values);
    const step = 120 / (HISTORY - 1);
    const start = 120 - step * (values.length - 1);
    const points = values.map((v, i) => `${(start + i * step).toFixed(1)},${(21 - (v / max) * 20).toFixed(1)}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.join(" "));
    svg.append(line);
  }
  return svg;
}

// done/s and failed/s from two polls of the runners' totals
function updateRates(topics) {
  const now = Date.now();
  for (const t of topics) {
    const prev = state.previous.get(t.name);
    if (prev && now > prev.at) {
      const secs = (now - prev.at) / 1000;
      const done = Math.max(0, t.done - prev.done) / secs;
      const failed = Math.max(0, t.failed - prev.failed) / secs;
      const cpu = Math.max(0, t.cpu_us - prev.cpu_us) / 1e6 / secs;
      state.rates.set(t.name, { done, failed, cpu });
      const h = state.history.get(t.name) || [];
      h.push(done);
      if (h.length > HISTORY) h.shift();
      state.history.set(t.name, h);
    }
    state.previous.set(t.name, { at: now, done: t.done, failed: t.failed, cpu_us: t.cpu_us });
  }
}

function drawTopics() {
  const body = $("#topics tbody");
  const rows = [];
  for (const t of state.topics) {
    if (state.filter && !t.name.includes(state.filter)) continue;
    const r = state.rates.get(t.name);
    const late = t.late_p50_ms == null ? "—" : `${t.late_p50_ms}/${t.late_p99_ms} ms`;
    const name = el("td", { class: "name" }, t.name);
    if (t.paused) name.append(el("span", { class: "badge" }, "paused"));
    const dead = t.dead > 0
      ? el("a", { class: "dead", onclick: () => openDead(t.name, 0) }, String(t.dead))
      : el("span", {}, "0");
    const toggle = t.paused
      ? el("button", { class: "resume", onclick: () => act("POST", `/topics/${enc(t.name)}/resume`) }, "resume")
      : el("button", { class: "pause", onclick: () => act("POST", `/topics/${enc(t.name)}/pause`) }, "pause");
    const versions = el("button", { class: "versions", onclick: () => openVersions(t.name) }, "versions");
    const keys = t.fairness ? [" ", el("button", { class: "keys", onclick: () => openKeys(t.name) }, "keys")] : [];
    rows.push(el("tr", { "data-topic": t.name, class: t.paused ? "paused" : "" },
      name,
      el("td", { title: t.handler || "" }, el("code", {}, short(t.handler))),
      el("td", { class: "n scheduled" }, String(t.scheduled),
        t.suspended ? el("span", { class: "suspended muted", title: "durable jobs that sleep or wait for a signal" }, ` (${t.suspended} suspended)`) : ""),
      el("td", { class: "n ready" }, String(t.ready)),
      el("td", { class: "n running" }, String(t.running)),
      el("td", { class: "n dead" }, dead,
        t.expired ? el("span", { class: "expired muted", title: "jobs not started by their deadline, ever (dead-lettered or dropped)" }, ` (${t.expired} expired)`) : ""),
      el("td", { class: "n done-rate" }, r ? r.done.toFixed(1) : "—"),
      el("td", { class: "n failed-rate" }, r ? r.failed.toFixed(1) : "—"),
      el("td", {}, sparkline(state.history.get(t.name) || [])),
      el("td", { class: "n late" }, late),
      el("td", { class: "n cpu-rate" }, r ? r.cpu.toFixed(3) : "—"),
      el("td", { class: "n memory" }, t.memory_p99 == null ? "—" : bytes(t.memory_p99)),
      el("td", {}, toggle, " ", versions, ...keys)));
  }
  body.replaceChildren(...rows);
  const select = $("#lookup-topic");
  const chosen = select.value;
  if (select.options.length !== state.topics.length) {
    select.replaceChildren(...state.topics.map((t) => el("option", { value: t.name }, t.name)));
    if (chosen) select.value = chosen;
  }
}

// 1.1 MiB, 40.0 MiB, 512 B
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

// a job's attempts that did not ack, with what each used
function costsTable(costs) {
  const ms = (us) => `${(us / 1000).toFixed(1)} ms`;
  const head = el("tr", {}, ...["attempt", "cpu", "wall", "memory", "start", "outbound http"].map((h) => el("th", {}, h)));
  const rows = costs.map((c) => el("tr", { "data-attempt": String(c.attempt) },
    el("td", { class: "n" }, String(c.attempt)),
    el("td", { class: "n cpu" }, ms(c.cpu_us)),
    el("td", { class: "n" }, ms(c.wall_us)),
    el("td", { class: "n memory" }, bytes(c.memory_peak)),
    el("td", { class: "n" }, ms(c.start_us)),
    el("td", {}, c.requests ? `${c.requests} requests, ${bytes(c.bytes_out)} out, ${bytes(c.bytes_in)} in` : "—")));
  return el("table", { id: "job-costs" }, el("thead", {}, head), el("tbody", {}, ...rows));
}

function enc(s) {
  return encodeURIComponent(s);
}

async function act(method, path, send) {
  try {
    await api(method, path, send);
    await refresh();
  } catch (e) {
    setStatus(e.message, true);
  }
}

async function openDead(topic, offset) {
  state.dead = { topic, offset: Math.max(0, offset) };
  await drawDead();
  $("#dead-section").scrollIntoView({ behavior: "smooth" });
}

async function drawDead() {
  const { topic, offset } = state.dead;
  if (!topic) return;
  const page = await api("GET", `/topics/${enc(topic)}/dead?offset=${offset}&limit=${DEAD_PAGE}`);
  $("#dead-section").hidden = false;
  $("#dead-topic").textContent = topic;
  $("#dead-total").textContent = page.total;
  const last = Math.min(page.total, offset + page.letters.length);
  $("#dead-page").textContent = page.total ? `${offset + 1}–${last} of ${page.total}` : "none";
  $("#dead-prev").disabled = offset === 0;
  $("#dead-next").disabled = last >= page.total;
  $("#dead tbody").replaceChildren(...page.letters.map((d) => el("tr", { "data-id": d.id },
    el("td", {}, el("code", {}, d.id)),
    el("td", { title: new Date(d.failed_at_ms).toISOString() }, ago(d.failed_at_ms)),
    el("td", { class: "n" }, String(d.attempts)),
    el("td", { title: d.handler || "" }, el("code", {}, short(d.handler))),
    el("td", { class: "reason" }, d.reason),
    el("td", {},
      el("button", { class: "retry", onclick: () => deadAct("POST", `/topics/${enc(topic)}/dead/${enc(d.id)}/retry`) }, "retry"),
      " ",
      el("button", { class: "purge danger", onclick: () => deadAct("DELETE", `/topics/${enc(topic)}/dead/${enc(d.id)}`) }, "purge")))));
}

async function deadAct(method, path) {
  try {
    await api(method, path);
    await drawDead();
    await refresh();
  } catch (e) {
    setStatus(e.message, true);
  }
}

async function openVersions(topic) {
  state.versions = { topic };
  await drawVersions();
  $("#versions-section").scrollIntoView({ behavior: "smooth" });
}

// the topic's stable version and canary side by side, the pin, the policy
// and the last verdict, and every kept version with a pin button
async function drawVersions() {
  const { topic } = state.versions;
  if (!topic) return;
  const path = `/topics/${enc(topic)}`;
  const [kept, status] = await Promise.all([api("GET", path + "/versions"), api("GET", path + "/rollout")]);
  const r = status.rollout;
  const c = r.canary;
  $("#versions-section").hidden = false;
  $("#versions-topic").textContent = topic;
  $("#rollout-promote").hidden = !c;
  $("#rollout-abort").hidden = !c;
  $("#unpin").hidden = !r.pinned;

  // with a canary, both sides count since it started; without, since first seen
  const stableKept = kept.versions.find((v) => v.version === r.stable);
  const stable = c ? c.stable_tally : stableKept ? stableKept.tally : null;
  const share = (s) => r.pinned ? "— (pinned)" : Math.round(s * 100) + "%";
  const side = (label, cls, a, b) => el("tr", { class: cls }, el("th", {}, label), el("td", {}, a), el("td", {}, b));
  $("#rollout tbody").replaceChildren(
    side("version", "version",
      el("code", {}, r.stable || "— (no runner has reported yet)"),
      c ? el("code", {}, c.version) : el("span", { class: "muted" }, "none")),
    side("share of attempts", "share", share(c ? 1 - c.share : 1), c ? share(c.share) : "—"),
    side("attempts", "attempts", stable ? String(stable.attempts) : "—", c ? String(c.tally.attempts) : "—"),
    side("failure rate", "failures",
      stable ? percent(stable.failures, stable.attempts) : "—",
      c ? percent(c.tally.failures, c.tally.attempts) : "—"),
    side("crashes", "crashes", stable ? String(stable.crashes) : "—", c ? String(c.tally.crashes) : "—"),
    side("window ends", "ends", "—",
      c ? el("span", { title: new Date(c.ends_ms).toISOString() }, when(c.ends_ms)) : "—"));

  const notes = [];
  if (r.pinned) {
    notes.push(el("li", { class: "pinned" }, "pinned to ", el("code", {}, r.pinned.version),
      ` by ${r.pinned.by}, ${ago(r.pinned.at_ms)}: it serves every attempt`));
  }
  const p = status.policy;
  notes.push(el("li", { class: "policy" }, p
    ? `policy: canary ${Math.round(p.canary * 100)}% for ${span(p.window_ms)}, at least ${p.min_attempts} attempts, ` +
      `failure rate at most ${Math.round(p.max_failure_rate * 100)}% and within ${Math.round(p.margin * 100)} points of stable`
    : "policy: none in queues.toml, a new version replaces the old at once"));
  if (r.last) {
    notes.push(el("li", { class: "verdict" }, "last verdict: ", el("code", {}, r.last.version),
      ` ${r.last.result.replace("_", " ")} by ${r.last.by}, ${ago(r.last.at_ms)}: ${r.last.reason}`));
  }
  $("#rollout-notes").replaceChildren(...notes);

  const rows = kept.versions.map((v) => el("tr", { "data-version": v.version },
    el("td", {}, el("code", {}, v.version)),
    el("td", {}, el("span", { class: "role " + v.role }, v.role)),
    el("td", { class: "n" }, String(v.tally.attempts)),
    el("td", { class: "n" }, percent(v.tally.failures, v.tally.attempts)),
    el("td", { class: "n" }, String(v.tally.crashes)),
    el("td", { title: new Date(v.first_seen_ms).toISOString() }, ago(v.first_seen_ms)),
    el("td", {}, v.role === "pinned" ? "" : el("button", { class: "pin", onclick: () => pin(topic, v.version) }, "pin"))));
  $("#versions tbody").replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { class: "muted", colspan: "7" }, "none yet: a runner records each version it loads"))]));
}

function pin(topic, version) {
  if (confirm(`Pin ${topic} to ${version}? Every attempt runs it until you unpin.`)) {
    act("POST", `/topics/${enc(topic)}/pin`, { version });
  }
}

function drawRunners(runners) {
  $("#runners tbody").replaceChildren(...runners.map((r) => el("tr", {},
    el("td", {}, el("code", {}, r.id)),
    el("td", {}, r.version),
    el("td", { class: "n" }, String(r.in_flight)),
    el("td", {}, ago(r.started_at_ms).replace(" ago", "")),
    el("td", {}, r.topics.join(", ")))));
}

function drawReloads(reloads) {
  const items = reloads.slice(0, 20).map((r) => el("li", {},
    el("span", { class: "muted" }, ago(r.at_ms) + " "),
    r.result.replace("_", " "),
    r.path ? " " + r.path.split("/").pop() : "",
    r.detail ? el("div", { class: "muted" }, r.detail.slice(0, 200)) : ""));
  $("#reloads").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "none since this runner started")]));
}

async function refresh() {
  if (state.lookup && state.lookup.live) showJob();
  try {
    const [topics, runners, reloads] = await Promise.all([
      api("GET", "/topics"),
      api("GET", "/runners"),
      api("GET", "/reloads"),
    ]);
    state.topics = topics.topics;
    updateRates(state.topics);
    drawTopics();
    drawRunners(runners.runners);
    drawReloads(reloads.reloads);
    if (state.dead.topic) await drawDead();
    if (state.versions.topic) await drawVersions();
    if (shownKeys) await drawKeys();
    const n = runners.runners.length;
    setStatus(`${state.topics.length} topics · ${n} runner${n === 1 ? "" : "s"} alive · ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus(e.message, true);
  }
}

$("#filter").addEventListener("input", (e) => { state.filter = e.target.value.trim(); drawTopics(); });
$("#token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.token = $("#token").value.trim();
  localStorage.setItem("hourglass-token", state.token);
  $("#token-form").hidden = true;
  refresh();
});
$("#dead-prev").addEventListener("click", () => openDead(state.dead.topic, state.dead.offset - DEAD_PAGE));
$("#dead-next").addEventListener("click", () => openDead(state.dead.topic, state.dead.offset + DEAD_PAGE));
$("#dead-retry-all").addEventListener("click", () => {
  if (confirm(`Retry every dead letter of ${state.dead.topic}?`)) deadAct("POST", `/topics/${enc(state.dead.topic)}/dead/retry`);
});
$("#dead-purge-all").addEventListener("click", () => {
  if (confirm(`Delete every dead letter of ${state.dead.topic} for good?`)) deadAct("DELETE", `/topics/${enc(state.dead.topic)}/dead`);
});
$("#rollout-promote").addEventListener("click", () => {
  const topic = state.versions.topic;
  if (confirm(`Promote the canary of ${topic}? It serves every attempt from now.`)) act("POST", `/topics/${enc(topic)}/rollout/promote`);
});
$("#rollout-abort").addEventListener("click", () => {
  const topic = state.versions.topic;
  if (confirm(`Abort the canary of ${topic}? It is retired and not rolled out again.`)) act("POST", `/topics/${enc(topic)}/rollout/abort`);
});
$("#unpin").addEventListener("click", () => act("DELETE", `/topics/${enc(state.versions.topic)}/pin`));
// a running job's latest progress report: a bar and what it said
function progressView(p) {
  if (!p) return [];
  const pct = p.percent ?? null;
  const said = [pct === null ? "" : `${pct}%`, p.detail ? JSON.stringify(p.detail) : "", `(attempt ${p.attempt})`];
  return [
    el("progress", { id: "job-progress", max: "100", ...(pct === null ? {} : { value: String(pct) }) }),
    el("span", { id: "job-progress-text" }, said.filter(Boolean).join(" ")),
  ];
}

// a durable job's journal (each step: name, size, attempt, when) and what
// it waits for while suspended
function journalView(journal, suspended) {
  const out = [];
  if (suspended) {
    const what = suspended.signal ? `signal "${suspended.signal}", or ${when(suspended.until_ms)}` : `a durable sleep, until ${when(suspended.until_ms)}`;
    out.push(el("p", { id: "job-suspended" }, `suspended since ${when(suspended.since_ms)}: waits for ${what}`));
  }
  if (!journal || !journal.steps.length) return out;
  const head = el("tr", {}, ...["step", "size", "attempt", "completed"].map((h) => el("th", {}, h)));
  const rows = journal.steps.map((s) => el("tr", { "data-step": s.name },
    el("td", {}, s.name),
    el("td", { class: "n" }, bytes(s.bytes)),
    el("td", { class: "n" }, String(s.attempt)),
    el("td", {}, when(s.completed_at_ms))));
  out.push(el("table", { id: "job-journal" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  return out;
}

// the job looked up by id, shown again with every refresh while it lives;
// once gone, its kept end (topics with `results`)
async function showJob() {
  const { topic, id } = state.lookup;
  const out = $("#lookup-result");
  try {
    const job = await api("GET", `/topics/${enc(topic)}/jobs/${enc(id)}`);
    out.textContent = JSON.stringify(job, null, 2);
    const costs = (job.dead && job.dead.costs) || (job.last_failure && job.last_failure.attempts) || [];
    $("#lookup-costs").replaceChildren(...(costs.length ? [costsTable(costs)] : []));
    $("#lookup-progress").replaceChildren(...progressView(job.progress));
    $("#lookup-journal").replaceChildren(...journalView(job.journal, job.suspended));
    $("#lookup-flow").replaceChildren(...flowLink(job.flow));
    state.lookup.live = job.state !== "dead";
  } catch (err) {
    state.lookup.live = false;
    $("#lookup-costs").replaceChildren();
    $("#lookup-progress").replaceChildren();
    $("#lookup-journal").replaceChildren();
    $("#lookup-flow").replaceChildren();
    try {
      const end = await api("GET", `/topics/${enc(topic)}/jobs/${enc(id)}/result`);
      out.textContent = JSON.stringify(end, null, 2);
    } catch (_) {
      out.textContent = err.message;
    }
  }
}

$("#lookup").addEventListener("submit", async (e) => {
  e.preventDefault();
  state.lookup = { topic: $("#lookup-topic").value, id: $("#lookup-id").value.trim(), live: false };
  await showJob();
});

refresh();
setInterval(refresh, POLL_MS);
