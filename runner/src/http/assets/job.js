// A job (#/job/TOPIC/ID): where it is and its options, its payload, its
// attempts as a timeline with their costs, the logs of each attempt, a
// durable job's journal and effects, its progress or result, its flow and
// trace; and what can be done to it: retry (on a version), cancel, signal,
// wake. Live: the stream pushes the job's view whenever it changes.
"use strict";

// the trace viewer's address, `{trace}` replaced by the trace id (kept in
// localStorage; e.g. http://localhost:16686/trace/{trace})
const traceLink = () => localStorage.getItem("hourglass-trace-url") || "";

views.job = {
  title: (p) => `${p.id} in ${p.topic}`,
  nav: "topics",
  render(p, root) {
    this.p = p;
    this.shown = null;
    this.head = el("div", { class: "bar" }, el("h2", { id: "job-title" }, `Job ${p.id} in `, link(`#/topic/${enc(p.topic)}`, p.topic)),
      el("span", { id: "job-actions" }));
    this.parts = {};
    for (const part of ["summary", "progress", "flow", "attempts", "logs", "journal", "payload", "result", "raw"]) {
      this.parts[part] = el("div", { id: "part-" + part });
    }
    const P = this.parts;
    root.append(
      section(null, this.head, P.summary, P.progress, P.flow),
      section("Attempts", P.attempts),
      section("Logs", P.logs),
      section("Journal", P.journal),
      el("div", { class: "two" }, section("Payload", P.payload), section("Result", P.result)),
      section(null, el("details", {}, el("summary", {}, "the job as the API gives it"), P.raw)));
    this.load();
  },
  live: (p) => ({ query: `job=${enc(p.topic)}/${enc(p.id)}`, on: { job: (v) => views.job.show(v) } }),
  async load() {
    const p = this.p;
    try {
      this.show(await api("GET", `/topics/${enc(p.topic)}/jobs/${enc(p.id)}`));
    } catch (e) {
      this.parts.summary.replaceChildren(el("p", { class: "error", id: "job-missing" }, e.message));
    }
  },
  // draw the job's view (from the API or the stream)
  show(job) {
    if (!job || !this.p) return;
    const text = JSON.stringify(job);
    if (text === this.shown) return;
    this.shown = text;
    const P = this.parts;
    P.raw.replaceChildren(el("pre", { id: "job-raw" }, JSON.stringify(job, null, 2)));
    P.summary.replaceChildren(summaryView(job));
    P.progress.replaceChildren(...progressView(job.progress));
    P.flow.replaceChildren(...flowLink(job.flow));
    const story = job.history || [];
    const costs = story.length ? story : (job.dead && job.dead.costs) || (job.last_failure && job.last_failure.attempts) || [];
    P.attempts.replaceChildren(...timelineView(costs), costsTable(costs));
    P.journal.replaceChildren(...journalView(job.journal, job.suspended, story));
    P.payload.replaceChildren(job.payload != null || job.payload_base64 != null
      ? el("pre", { id: "job-payload" }, pretty(job.payload, job.payload_base64))
      : el("p", { class: "muted" }, job.state === "acked" ? "not kept with its end" : "—"));
    P.result.replaceChildren(job.result !== undefined || job.result_base64
      ? el("pre", { id: "job-result" }, job.result_base64 ? pretty(null, job.result_base64) : JSON.stringify(job.result, null, 2))
      : el("p", { class: "muted" }, job.state === "dead" ? `dead: ${job.dead ? job.dead.reason : ""}` : "none yet"));
    $("#job-actions").replaceChildren(...actionsView(this.p, job));
    this.logs();
  },
  async logs() {
    const p = this.p;
    try {
      const logs = await api("GET", `/topics/${enc(p.topic)}/jobs/${enc(p.id)}/logs`);
      this.parts.logs.replaceChildren(logsView(logs));
    } catch (e) {
      this.parts.logs.replaceChildren(el("p", { class: "muted", id: "job-no-logs" }, e.message));
    }
  },
};

function summaryView(job) {
  const facts = [
    ["state", el("span", { class: "badge state-" + job.state, id: "job-state" }, job.state)],
    ["attempts", `${job.attempts}${job.max_attempts ? ` of ${job.max_attempts}` : ""}${job.max_attempts_source ? ` (${job.max_attempts_source})` : ""}`],
    job.at_ms ? [job.state === "running" ? "lease ends" : "due", el("span", { title: iso(job.at_ms) }, when(job.at_ms))] : null,
    job.enqueued_at_ms ? ["enqueued", el("span", { title: iso(job.enqueued_at_ms) }, when(job.enqueued_at_ms))] : null,
    job.ended_at_ms ? ["ended", el("span", { title: iso(job.ended_at_ms) }, when(job.ended_at_ms))] : null,
    job.expires_at_ms ? ["expires", when(job.expires_at_ms)] : null,
    job.priority != null ? ["priority", String(job.priority)] : null,
    job.key != null ? ["tenant key", job.key] : null,
    job.version ? ["version", el("code", { title: job.version }, short(job.version)), job.version_source ? ` (${job.version_source})` : ""] : null,
    job.pinned_version ? ["pinned to", el("code", {}, short(job.pinned_version))] : null,
    job.canary_version ? ["canary", el("code", {}, short(job.canary_version))] : null,
    job.payload_bytes != null ? ["payload", bytes(job.payload_bytes)] : null,
    job.reason ? ["reason", job.reason] : null,
    job.traceparent ? ["trace", traceView(job.traceparent)] : null,
  ].filter(Boolean);
  return el("dl", { class: "facts", id: "job-summary" }, facts.map(([k, ...v]) => [el("dt", {}, k), el("dd", {}, ...v)]));
}

// W3C traceparent "00-<trace>-<span>-01": the trace id, linked to the
// team's trace viewer when one is set
function traceView(traceparent) {
  const trace = (traceparent.split("-")[1] || traceparent);
  const url = traceLink();
  const id = url ? el("a", { href: url.replace("{trace}", trace), id: "job-trace", target: "_blank", rel: "noopener" }, trace)
    : el("code", { id: "job-trace" }, trace);
  const set = el("button", { class: "small", onclick: () => {
    const next = prompt("Trace viewer address, {trace} for the id (empty: none)", url);
    if (next !== null) { localStorage.setItem("hourglass-trace-url", next.trim()); views.job.shown = null; views.job.load(); }
  } }, "set viewer link");
  return el("span", {}, id, " ", set);
}

// a running job's latest progress report: a bar and what it said
function progressView(p) {
  if (!p) return [];
  const pct = p.percent ?? null;
  const said = [pct === null ? "" : `${pct}%`, p.detail ? JSON.stringify(p.detail) : "", `(attempt ${p.attempt})`];
  return [el("div", { class: "progress" },
    el("progress", { id: "job-progress", max: "100", ...(pct === null ? {} : { value: String(pct) }) }),
    el("span", { id: "job-progress-text" }, said.filter(Boolean).join(" ")))];
}

// a flow's job links to its flow
function flowLink(flow) {
  if (!flow) return [];
  return [el("p", { id: "job-flow" }, "in flow ", link(`#/flow/${enc(flow.id)}`, flow.id, { class: "flow" }))];
}

// retry (dead: optionally on a kept version), cancel, signal, wake
function actionsView(p, job) {
  const path = `/topics/${enc(p.topic)}`;
  const jobPath = `${path}/jobs/${enc(p.id)}`;
  const again = () => { views.job.shown = null; return views.job.load(); };
  const out = [];
  if (job.state === "dead") {
    out.push(el("button", { class: "retry", onclick: () => act("POST", `${path}/dead/${enc(p.id)}/retry`, undefined, again) }, "retry"));
    const pick = el("select", { id: "replay-version", "aria-label": "version to replay on" }, el("option", { value: "" }, "replay on version…"));
    api("GET", `${path}/versions`).then((v) => {
      for (const k of v.versions) pick.append(el("option", { value: k.version }, `${short(k.version)} (${k.role})`));
    }).catch(() => {});
    pick.addEventListener("change", () => {
      if (pick.value) act("POST", `${path}/dead/${enc(p.id)}/retry`, { version: pick.value, reset_journal: false }, again);
    });
    out.push(pick);
    out.push(el("button", { class: "purge danger", onclick: () => confirm(`Purge ${p.id} for good?`) && act("DELETE", `${path}/dead/${enc(p.id)}`, undefined, again) }, "purge"));
  }
  if (["scheduled", "ready", "running", "suspended", "dead"].includes(job.state)) {
    out.push(el("button", { class: "cancel danger", onclick: () => confirm(`Cancel ${p.id}?`) && act("DELETE", jobPath, undefined, again) }, "cancel"));
  }
  if (job.suspended || job.journal) {
    out.push(el("button", { class: "signal", onclick: () => {
      const name = prompt("Signal name", (job.suspended && job.suspended.signal) || "");
      if (!name) return;
      const payload = prompt("Its payload (text or JSON)", "{}");
      if (payload !== null) act("POST", `${jobPath}/signals/${enc(name)}`, payload, again);
    } }, "signal…"));
  }
  if (job.suspended) out.push(el("button", { class: "wake", onclick: () => act("POST", `${jobPath}/wake`, undefined, again) }, "wake"));
  return out;
}
