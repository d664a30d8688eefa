// The console's frame: routes (every view has a hash URL that survives a
// reload: #/topics, #/topic/NAME, #/topic/NAME/dead?prefix=..., #/job/TOPIC/ID,
// #/flows, #/flow/ID, #/tenants, #/rollouts, #/cron, #/runners), the live stream of
// the view on screen, the theme, the token and the keys. Loaded last.
"use strict";

const routes = [
  [/^(topics)?$/, "topics", () => ({})],
  [/^topic\/([^/]+)$/, "topic", (m) => ({ topic: m[1] })],
  [/^topic\/([^/]+)\/([a-z]+)$/, "browse", (m) => ({ topic: m[1], state: m[2] })],
  [/^job\/([^/]+)\/(.+)$/, "job", (m) => ({ topic: m[1], id: m[2] })],
  [/^flows$/, "flows", () => ({})],
  [/^flow\/(.+)$/, "flow", (m) => ({ id: m[1] })],
  [/^tenants(?:\/([^/]+))?$/, "tenants", (m) => ({ topic: m[1] })],
  [/^rollouts(?:\/([^/]+))?$/, "rollouts", (m) => ({ topic: m[1] })],
  [/^cron$/, "cron", () => ({})],
  [/^runners$/, "runners", () => ({})],
];

let current = null; // {name, view, params, stop, cleanup}

// "#/topic/a%2Fb/dead?prefix=x" -> ["topic/a%2Fb/dead", URLSearchParams]
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  return [path, new URLSearchParams(query || "")];
}

function route() {
  const [path, query] = parseHash();
  let found = null;
  for (const [re, name, params] of routes) {
    const m = path.match(re);
    if (m) {
      const p = params(m.map((s) => (s === undefined ? s : decodeURIComponent(s))));
      found = { name, params: { ...p, query } };
      break;
    }
  }
  if (current) {
    if (current.stop) current.stop();
    if (current.cleanup) current.cleanup();
  }
  const root = $("#view");
  root.replaceChildren();
  if (!found || !views[found.name]) {
    root.append(section("Not found", el("p", { id: "not-found" }, `no view at #/${path}: `, link("#/topics", "topics"))));
    current = null;
    return;
  }
  const view = views[found.name];
  document.title = `${view.title(found.params)} · hourglass`;
  for (const a of $$("nav a")) a.classList.toggle("here", a.dataset.view === (view.nav || found.name));
  current = { name: found.name, view, params: found.params };
  current.cleanup = view.render(found.params, root);
  const live = view.live ? view.live(found.params) : { query: "", on: {} };
  current.stop = listen(live.query ? "?" + live.query : "", {
    ...live.on,
    overview: (ov) => overview(ov),
    error: (e) => setStatus(e.error, true),
  });
  if (state.overview) overview(state.overview);
}

// every overview: the rates, the status line, then the view's own redraw
function overview(ov) {
  state.overview = ov;
  updateRates(ov.topics.topics);
  const n = ov.runners.length;
  setStatus(`${ov.topics.topics.length} topics · ${n} runner${n === 1 ? "" : "s"} alive · live · ${new Date().toLocaleTimeString()}`);
  if (current && current.view.overview) current.view.overview(ov, current.params);
}

// re-render the view on screen (after an action changed what it shows)
function rerender() {
  route();
}

// the theme: the system's unless chosen, kept in localStorage
function setTheme(theme) {
  document.documentElement.dataset.theme = theme;
  $("#theme").textContent = theme === "dark" ? "light theme" : "dark theme";
}
const systemTheme = () => (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
setTheme(localStorage.getItem("hourglass-theme") || systemTheme());
$("#theme").addEventListener("click", () => {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem("hourglass-theme", next);
  setTheme(next);
});

$("#token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.token = $("#token").value.trim();
  localStorage.setItem("hourglass-token", state.token);
  $("#token-form").hidden = true;
  route();
});

// keys: g then t/f/n/r/c/u (topics, flows, tenants, rollouts, schedules, runners); / finds;
// j/k move between rows, x selects one, Enter opens it; ? lists them
let pending = null;
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (t.matches("input, textarea, select")) {
    if (e.key === "Escape") t.blur();
    return;
  }
  if (pending === "g") {
    pending = null;
    const to = { t: "#/topics", f: "#/flows", n: "#/tenants", r: "#/rollouts", c: "#/cron", u: "#/runners" }[e.key];
    if (to) location.hash = to;
    return;
  }
  if (e.key === "g") pending = "g";
  else if (e.key === "/") {
    const find = $("#view input[type=search]");
    if (find) { e.preventDefault(); find.focus(); }
  } else if (e.key === "j" || e.key === "k") moveRow(e.key === "j" ? 1 : -1);
  else if (e.key === "x") {
    const box = document.activeElement && $("input[type=checkbox]", document.activeElement);
    if (box) box.click();
  } else if (e.key === "Enter" && document.activeElement && document.activeElement.matches("tr[tabindex]")) {
    const a = $("a[href]", document.activeElement);
    if (a) location.hash = a.getAttribute("href");
  } else if (e.key === "?") $("#keys-help").toggleAttribute("hidden");
});

function moveRow(by) {
  const rows = $$("#view tr[tabindex]");
  if (!rows.length) return;
  const i = rows.indexOf(document.activeElement);
  const next = rows[Math.max(0, Math.min(rows.length - 1, i < 0 ? 0 : i + by))];
  next.focus();
}

window.addEventListener("hashchange", route);
route();
