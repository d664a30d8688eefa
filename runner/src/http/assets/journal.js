// The job page's record of what happened: the attempts as a timeline and a
// table with their costs, the logs grouped by attempt, and a durable job's
// journal (steps recorded and replayed, sleeps, signals) with its effects.
"use strict";

const OUTCOME = { ack: "acked", retry: "retried", dead: "dead", suspend: "suspended", expired: "expired", lease_expired: "lease lost" };

// each attempt a bar from its start to its end on one time axis
function timelineView(costs) {
  const timed = costs.filter((c) => c.started_at_ms && c.ended_at_ms);
  if (!timed.length) return [];
  const from = Math.min(...timed.map((c) => c.due_at_ms || c.started_at_ms));
  const to = Math.max(...timed.map((c) => c.ended_at_ms));
  const whole = Math.max(1, to - from);
  const at = (t) => ((t - from) * 100 / whole).toFixed(2) + "%";
  const rows = timed.map((c, i) => el("div", { class: "lane", "data-attempt": String(c.attempt) },
    el("span", { class: "lane-name" }, `#${c.attempt}${i && c.attempt === timed[i - 1].attempt ? "′" : ""}`),
    el("span", { class: "lane-track" },
      c.due_at_ms && c.due_at_ms < c.started_at_ms ? el("span", { class: "wait", style: `left:${at(c.due_at_ms)};width:calc(${at(c.started_at_ms)} - ${at(c.due_at_ms)})`, title: `waited ${millis(c.started_at_ms - c.due_at_ms)} after it was due` }) : "",
      el("span", { class: "run outcome-" + (c.outcome || "none"), style: `left:${at(c.started_at_ms)};width:max(3px, calc(${at(c.ended_at_ms)} - ${at(c.started_at_ms)}))`,
        title: `${OUTCOME[c.outcome] || "?"}: ${millis(c.ended_at_ms - c.started_at_ms)}, from ${iso(c.started_at_ms)}` })),
    el("span", { class: "lane-what" }, OUTCOME[c.outcome] || "")));
  return [el("div", { class: "timeline", id: "job-timeline" }, rows,
    el("div", { class: "lane axis muted" }, el("span", {}, iso(from).slice(11, 23)), el("span", {}, `${millis(whole)} in all`), el("span", {}, iso(to).slice(11, 23))))];
}

// each attempt's costs: which attempt first (the table's first column)
function costsTable(costs) {
  const rows = costs.map((c) => el("tr", { "data-attempt": String(c.attempt), class: "outcome-" + (c.outcome || "none") },
    el("td", { class: "n" }, String(c.attempt)),
    el("td", {}, OUTCOME[c.outcome] || "—"),
    el("td", { class: "n cpu" }, ms(c.cpu_us || 0)),
    el("td", { class: "n" }, ms(c.wall_us || 0)),
    el("td", { class: "n memory" }, bytes(c.memory_peak || 0)),
    el("td", { class: "n" }, ms(c.start_us || 0)),
    el("td", {}, c.requests ? `${c.requests} requests, ${bytes(c.bytes_out)} out, ${bytes(c.bytes_in)} in` : "—"),
    el("td", { class: "steps" }, c.steps_recorded || c.steps_replayed ? `${c.steps_recorded || 0} recorded, ${c.steps_replayed || 0} replayed` : ""),
    el("td", { title: c.runner || "" }, c.runner ? c.runner.split("-").slice(0, 2).join("-") : ""),
    el("td", {}, el("code", { title: c.handler || "" }, short(c.handler))),
    el("td", { title: iso(c.started_at_ms) }, c.started_at_ms ? when(c.started_at_ms) : ""),
    el("td", { class: "reason" }, c.error || (c.waits_for ? `waits for "${c.waits_for}"` : c.waits_until_ms ? `sleeps until ${iso(c.waits_until_ms)}` : ""))));
  return table({ id: "job-costs" }, ["attempt", "outcome", "cpu", "wall", "memory", "start", "outbound http", "steps", "runner", "handler", "started", "error / waits"], rows,
    "no attempt yet");
}

// the kept lines, grouped by attempt, a marker where older ones were dropped
function logsView(logs) {
  const groups = new Map();
  for (const line of logs.lines) {
    const a = line.stream === "dropped" ? "dropped" : String(line.attempt);
    if (!groups.has(a)) groups.set(a, []);
    groups.get(a).push(line);
  }
  const out = [el("p", { class: "muted", id: "logs-summary" },
    `${bytes(logs.bytes)} kept${logs.dropped_bytes ? `, ${bytes(logs.dropped_bytes)} of older lines dropped` : ""}${logs.ended ? " (kept with its end)" : ""}`)];
  for (const [attempt, lines] of groups) {
    const text = lines.map((l) => l.stream === "dropped" ? `… ${l.text}`
      : `${iso(l.at_ms).slice(11, 23)} ${l.stream.padEnd(6)} ${l.text}`).join("\n");
    out.push(el("details", { class: "logs", "data-attempt": attempt, open: true },
      el("summary", {}, attempt === "dropped" ? "dropped" : `attempt ${attempt} (${lines.length} lines)`),
      el("pre", {}, text)));
  }
  return el("div", { id: "job-logs" }, out);
}

// a durable job's journal: its steps (which attempt recorded each, and the
// later attempts that replayed them), timers, signals, effects; and what it
// waits for while suspended
function journalView(journal, suspended, story) {
  const out = [];
  if (suspended) {
    const what = suspended.signal ? `signal "${suspended.signal}", or ${when(suspended.until_ms)}` : `a durable sleep, until ${when(suspended.until_ms)}`;
    out.push(el("p", { id: "job-suspended" }, `suspended since ${when(suspended.since_ms)}: waits for ${what}`));
  }
  if (!journal) {
    out.push(el("p", { class: "muted" }, "no journal (not a durable job, or it has not run)"));
    return out;
  }
  const replayers = (story || []).filter((a) => a.steps_replayed > 0).map((a) => a.attempt);
  const rows = journal.steps.map((s) => {
    const later = [...new Set(replayers.filter((a) => a > s.attempt))];
    return el("tr", { "data-step": s.name },
      el("td", {}, s.name),
      el("td", { class: "n" }, bytes(s.bytes)),
      el("td", { class: "n" }, String(s.attempt)),
      el("td", { title: iso(s.completed_at_ms) }, when(s.completed_at_ms)),
      el("td", { class: "replayed" }, later.length ? `replayed by attempt ${later.join(", ")}` : ""));
  });
  out.push(table({ id: "job-journal" }, ["step", "size", "recorded by attempt", "completed", "replayed"], rows, "no step completed yet"));
  const timers = Object.entries(journal.timers || {});
  if (timers.length) {
    out.push(el("ul", { id: "job-timers" }, timers.map(([n, t]) => el("li", {}, `sleep ${n}: wakes ${when(t)}`))));
  }
  if (journal.signals.length) {
    out.push(el("ul", { id: "job-signals" }, journal.signals.map((s) => el("li", {}, `signal "${s.name}" received (${bytes(s.bytes)})`))));
  }
  if (journal.effects) {
    out.push(el("details", { id: "job-effects", open: true }, el("summary", {}, "effects journal"),
      el("pre", {}, JSON.stringify(journal.effects, null, 2))));
  }
  return out;
}
