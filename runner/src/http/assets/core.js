// The console's shared parts: the API call (with the token the operator
// pastes in, kept in localStorage), the live stream (Server-Sent Events read
// with fetch, so the token goes as a header), and the helpers every view
// draws with. No framework, no build step: every file is a plain script the
// runner embeds; each view registers itself in `views` (see app.js).
"use strict";

const state = {
  token: localStorage.getItem("hourglass-token") || "",
  overview: null, // the last `overview` event: {topics: {topics, runs_jobs}, runners}
  previous: new Map(), // topic -> {at, done, failed, cpu_us}: for the rates
  rates: new Map(), // topic -> {done, failed, cpu} per second
};

// every view: name -> {title, render(params, root) -> optional cleanup,
// overview(ov)?, job(view)?, flow(view)?}
const views = {};

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const enc = encodeURIComponent;

// a link to a view: `link("#/job/t/id", "id")`
function link(href, text, attrs = {}) {
  return el("a", { href, ...attrs }, text);
}

function headers() {
  const h = {};
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

// `send`, if given, goes as the JSON body (a string goes as it is)
async function api(method, path, send) {
  const init = { method, headers: headers() };
  if (send !== undefined) {
    const raw = typeof send === "string";
    init.headers["Content-Type"] = raw ? "application/octet-stream" : "application/json";
    init.body = raw ? send : JSON.stringify(send);
  }
  const res = await fetch("/api" + path, init);
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) $("#token-form").hidden = false;
  if (!res.ok) {
    const e = new Error(body.error || res.statusText);
    e.status = res.status;
    throw e;
  }
  return body;
}

// an action the operator asked for: its answer (or refusal) in the notice,
// which stays until the next action (the status line is the stream's)
async function act(method, path, send, done) {
  try {
    const answer = await api(method, path, send);
    setNotice(`${method} ${path}: done`);
    if (done) await done(answer);
    return answer;
  } catch (e) {
    setNotice(`${method} ${path}: ${e.message}`, true);
    return null;
  }
}

function setNotice(text, error) {
  const n = $("#notice");
  n.textContent = text;
  n.classList.toggle("error", !!error);
  n.hidden = false;
}

function setStatus(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("error", !!error);
}

// The live stream: `query` adds a job (`job=TOPIC/ID`) or flow (`flow=ID`)
// to the overview; `on` maps event names to handlers. Reconnects after 2 s
// until `stop()`.
function listen(query, on) {
  const ctl = new AbortController();
  let stopped = false;
  const run = async () => {
    while (!stopped) {
      try {
        const res = await fetch("/api/stream" + query, { headers: headers(), signal: ctl.signal });
        if (res.status === 401) $("#token-form").hidden = false;
        if (!res.ok) throw new Error((await res.json().catch(() => ({}))).error || res.statusText);
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const chunk = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let name = "message";
            const data = [];
            for (const line of chunk.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
            }
            if (data.length && on[name]) on[name](JSON.parse(data.join("\n")));
          }
        }
      } catch (e) {
        if (stopped) return;
        setStatus("live updates: " + e.message, true);
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  };
  run();
  return () => { stopped = true; ctl.abort(); };
}

// done/s, failed/s and CPU/s from two overviews' totals
function updateRates(topics) {
  const now = Date.now();
  for (const t of topics) {
    const prev = state.previous.get(t.name);
    if (prev && now > prev.at) {
      const secs = (now - prev.at) / 1000;
      state.rates.set(t.name, {
        done: Math.max(0, t.done - prev.done) / secs,
        failed: Math.max(0, t.failed - prev.failed) / secs,
        cpu: Math.max(0, t.cpu_us - prev.cpu_us) / 1e6 / secs,
      });
    }
    state.previous.set(t.name, { at: now, done: t.done, failed: t.failed, cpu_us: t.cpu_us });
  }
}

// a length of time in words: "40 s", "5 min", "2 h", "3 d"
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  if (s < 86400) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}
const ago = (ms) => span(Date.now() - ms) + " ago";
// a time that may be ahead: "in 5 min" or "5 min ago"
const when = (ms) => (ms > Date.now() ? "in " + span(ms - Date.now()) : ago(ms));
const iso = (ms) => (ms ? new Date(ms).toISOString() : "");
const percent = (part, whole) => (whole ? (part * 100 / whole).toFixed(1) + "%" : "—");
const short = (hash) => (hash ? hash.slice(0, 12) : "—");
const ms = (us) => `${(us / 1000).toFixed(1)} ms`;

// a duration in ms, readable: "12 ms", "3.4 s", "5 min"
function millis(n) {
  if (n == null) return "—";
  if (n < 1000) return `${n} ms`;
  if (n < 60000) return `${(n / 1000).toFixed(1)} s`;
  return span(n);
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

// a table from headings and rows (arrays of cells, or ready <tr>s)
function table(attrs, heads, rows, empty) {
  const head = el("tr", {}, heads.map((h) => el("th", typeof h === "string" ? {} : h.attrs, typeof h === "string" ? h : h.text)));
  const body = rows.length ? rows : [el("tr", {}, el("td", { class: "muted", colspan: String(heads.length) }, empty || "none"))];
  return el("table", attrs, el("thead", {}, head), el("tbody", {}, body));
}

function section(title, ...children) {
  return el("section", {}, title ? el("h2", {}, title) : null, ...children);
}

// bytes as pretty JSON when they are JSON, else as text, else as hex
function pretty(text, base64) {
  if (text != null) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (_) {
      return text;
    }
  }
  if (base64 != null) {
    const raw = atob(base64);
    const hex = [];
    for (let i = 0; i < raw.length; i += 16) {
      const row = [...raw.slice(i, i + 16)].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0"));
      hex.push(i.toString(16).padStart(6, "0") + "  " + row.join(" "));
    }
    return hex.join("\n");
  }
  return "";
}

// the topics as the last overview gave them
function topicsNow() {
  return state.overview ? state.overview.topics.topics : [];
}
