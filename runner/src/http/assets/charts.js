// Charts of a topic's minutes (GET /api/history: what every runner did each
// minute, kept 25 hours in Redis) drawn with uPlot: throughput (acked,
// failed, dead per minute) and lateness (p50, p99 of the starts).
"use strict";

const COLOURS = ["#3a7bd5", "#c44", "#e9a400", "#2e9b4f", "#8a5cd0", "#0aa", "#d06a2b", "#777"];

// one x per minute from `since` to now (seconds, as uPlot wants), and each
// series' values: `fill` where a minute holds nothing (0 for counts, null
// for lateness: a gap)
function byMinute(minutes, sinceMs, series) {
  const at = new Map(minutes.map((m) => [m.at_ms, m]));
  const first = Math.floor(sinceMs / 60000) * 60000;
  const xs = [];
  const ys = series.map(() => []);
  for (let t = first; t <= Date.now(); t += 60000) {
    xs.push(t / 1000);
    const m = at.get(t);
    series.forEach((s, i) => ys[i].push(m ? s.value(m) : s.fill));
  }
  return [xs, ...ys];
}

// a uPlot chart in `root`; `data` as byMinute gives it
function chart(root, { title, series, data, unit, id }) {
  const style = getComputedStyle(document.documentElement);
  const ink = style.getPropertyValue("--muted").trim() || "#778";
  const grid = style.getPropertyValue("--line").trim() || "#eef";
  const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
  const box = el("div", { class: "chart", id, "data-points": String(data[0].length) });
  root.append(box);
  const width = Math.max(300, Math.min(680, (root.clientWidth || 700) - 20));
  const opts = {
    title,
    width,
    height: 180,
    scales: { x: { time: true } },
    axes: [axis, { ...axis, values: (u, vals) => vals.map((v) => (unit ? unit(v) : v)) }],
    series: [{}, ...series.map((s, i) => ({
      label: s.label,
      stroke: s.colour || COLOURS[i % COLOURS.length],
      width: 1.5,
      spanGaps: false,
      value: (u, v) => (v == null ? "—" : unit ? unit(v) : v),
    }))],
  };
  // eslint-disable-next-line no-undef
  return new uPlot(opts, data, box);
}

// a topic's two charts over `hours`, into `root`
async function topicCharts(root, topic, hours) {
  const h = await api("GET", `/history?topics=${enc(topic)}&since=${hours}h`);
  const minutes = h.topics[topic] || [];
  root.replaceChildren();
  const throughput = [
    { label: "acked/min", value: (m) => m.acked, fill: 0, colour: "#2e9b4f" },
    { label: "failed/min", value: (m) => m.failed, fill: 0, colour: "#e9a400" },
    { label: "dead/min", value: (m) => m.dead, fill: 0, colour: "#c44" },
  ];
  const late = [
    { label: "late p50", value: (m) => m.late_p50_ms, fill: null, colour: "#3a7bd5" },
    { label: "late p99", value: (m) => m.late_p99_ms, fill: null, colour: "#8a5cd0" },
  ];
  chart(root, { id: "chart-throughput", title: `${topic}: jobs per minute, last ${hours} h`, series: throughput, data: byMinute(minutes, h.since_ms, throughput) });
  chart(root, { id: "chart-lateness", title: `${topic}: lateness of starts`, series: late, data: byMinute(minutes, h.since_ms, late), unit: millis });
  const total = minutes.reduce((n, m) => n + m.acked, 0);
  root.append(el("p", { class: "muted", id: "chart-total" }, `${total} acked in the last ${hours} h (${minutes.length} minutes with activity)`));
}

// every topic's throughput in one chart (the topics with most acked)
async function overviewChart(root, hours) {
  const h = await api("GET", `/history?since=${hours}h`);
  const busiest = Object.entries(h.topics)
    .map(([t, ms]) => [t, ms, ms.reduce((n, m) => n + m.acked + m.failed, 0)])
    .filter(([, , n]) => n > 0)
    .sort((a, b) => b[2] - a[2])
    .slice(0, 8);
  root.replaceChildren();
  if (!busiest.length) {
    root.append(el("p", { class: "muted", id: "chart-none" }, `no attempts in the last ${hours} h`));
    return;
  }
  const xs = byMinute([], h.since_ms, [])[0];
  const series = busiest.map(([t]) => ({ label: t }));
  const data = [xs, ...busiest.map(([, ms]) => {
    const at = new Map(ms.map((m) => [m.at_ms / 1000, m.acked]));
    return xs.map((x) => at.get(x) || 0);
  })];
  chart(root, { id: "chart-topics", title: `acked per minute, last ${hours} h (busiest topics)`, series, data });
  const late = busiest.map(([t]) => ({ label: t }));
  const lateData = [xs, ...busiest.map(([, ms]) => {
    const at = new Map(ms.map((m) => [m.at_ms / 1000, m.late_p99_ms]));
    return xs.map((x) => (at.has(x) ? at.get(x) : null));
  })];
  chart(root, { id: "chart-topics-late", title: "lateness p99 of starts", series: late, data: lateData, unit: millis });
}
