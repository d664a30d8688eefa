// A state of a topic (#/topic/NAME/dead?prefix=&key=&version=&error=&cursor=):
// its jobs a page at a time from a cursor (GET /api/topics/{t}/jobs: Redis
// reads from the cursor's rank, never the whole topic), the filters the
// API has, and what to do to the jobs selected (POST /api/topics/{t}/bulk).
"use strict";

const FILTERS = [
  ["prefix", "id starts with"],
  ["key", "tenant key (- for none)"],
  ["version", "handler version"],
  ["error", "error holds"],
];
const PAGE = 50;

// what the `at_ms` of a row means in each state
const AT = { scheduled: "due", ready: "due", running: "lease ends", suspended: "wakes", dead: "died", ended: "ended" };

views.browse = {
  title: (p) => `${p.topic} ${p.state}`,
  nav: "topics",
  render(p, root) {
    this.p = p;
    if (!this.trail || this.trail.key !== `${p.topic}/${p.state}`) {
      this.trail = { key: `${p.topic}/${p.state}`, cursors: [] };
      this.selected = new Set();
    }
    const base = `#/topic/${enc(p.topic)}`;
    const tabs = el("nav", { class: "tabs", "aria-label": "states" }, STATES.map((s) =>
      link(`${base}/${s}`, s, { class: s === p.state ? "here" : "", "data-state": s })));
    const form = el("form", { id: "browse-filters", class: "filters" },
      FILTERS.map(([name, label]) => el("label", {}, label + " ",
        el("input", { name, type: name === "prefix" ? "search" : "text", value: p.query.get(name) || "", size: "14" }))),
      el("button", { type: "submit" }, "filter"),
      el("a", { href: `${base}/${p.state}`, class: "button" }, "clear"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [name] of FILTERS) {
        const v = form.elements[name].value.trim();
        if (v) q.set(name, v);
      }
      this.trail.cursors = [];
      location.hash = `${base}/${p.state}${q.toString() ? "?" + q : ""}`;
    });
    const dead = p.state === "dead";
    const bulk = el("div", { class: "bulk", id: "bulk" },
      el("span", { id: "selected-count", class: "muted" }, "0 selected"),
      dead ? el("button", { class: "bulk-retry", onclick: () => this.bulk("retry") }, "retry selected") : "",
      p.state !== "ended" ? el("button", { class: "bulk-cancel danger", onclick: () => this.bulk("cancel") }, "cancel selected") : "",
      dead ? el("button", { class: "bulk-purge danger", onclick: () => this.bulk("purge") }, "purge selected") : "",
      el("span", { id: "bulk-result", role: "status" }));
    this.pager = el("span", { class: "pager" },
      el("button", { id: "browse-first", onclick: () => this.go(null, []) }, "first"),
      el("span", { id: "browse-page", class: "muted" }, ""),
      el("button", { id: "browse-next", onclick: () => this.go(this.next, [...this.trail.cursors, p.query.get("cursor") || ""]) }, "next page"));
    this.body = el("div", { id: "browse-rows" }, el("p", { class: "muted" }, "loading…"));
    root.append(section(null,
      el("div", { class: "bar" }, el("h2", {}, "Jobs of ", link(base, p.topic), ` ${p.state}`), this.pager),
      tabs, form, bulk, this.body));
    this.load();
  },
  // to the page at `cursor`, keeping the trail back to the first
  go(cursor, cursors) {
    this.trail.cursors = cursors;
    const q = new URLSearchParams(this.p.query);
    if (cursor) q.set("cursor", cursor);
    else q.delete("cursor");
    location.hash = `#/topic/${enc(this.p.topic)}/${this.p.state}?${q}`;
  },
  async load() {
    const p = this.p;
    const q = new URLSearchParams({ state: p.state, limit: String(PAGE) });
    for (const name of ["cursor", ...FILTERS.map((f) => f[0])]) if (p.query.get(name)) q.set(name, p.query.get(name));
    let page;
    try {
      page = await api("GET", `/topics/${enc(p.topic)}/jobs?${q}`);
    } catch (e) {
      this.body.replaceChildren(el("p", { class: "error", id: "browse-error" }, e.message));
      return;
    }
    this.next = page.next;
    this.page = page;
    const n = this.trail.cursors.length + (p.query.get("cursor") && !this.trail.cursors.length ? 1 : 0);
    $("#browse-page").textContent = `page ${n + 1} · ${page.jobs.length} jobs${page.next ? "" : " · the last"}`;
    $("#browse-next").disabled = !page.next;
    $("#browse-first").disabled = !p.query.get("cursor");
    const all = el("input", { type: "checkbox", id: "select-page", "aria-label": "select every job of this page" });
    all.addEventListener("change", () => {
      for (const box of $$("#browse tbody input[type=checkbox]")) if (box.checked !== all.checked) box.click();
    });
    const rows = page.jobs.map((j) => this.row(j));
    this.body.replaceChildren(table({ id: "browse" }, [{ text: all, attrs: {} }, "id", AT[p.state] || "at",
      { text: "attempts", attrs: { class: "n" } }, "key", "version", "error"], rows,
      `no ${p.state} jobs${[...p.query.keys()].some((k) => k !== "cursor") ? " match" : ""}`));
    this.count();
  },
  row(j) {
    const p = this.p;
    const box = el("input", { type: "checkbox", class: "select", "aria-label": `select ${j.id}` });
    box.checked = this.selected.has(j.id);
    box.addEventListener("change", () => {
      if (box.checked) this.selected.add(j.id);
      else this.selected.delete(j.id);
      this.count();
    });
    const at = j.suspended ? j.suspended.until_ms : j.at_ms;
    const error = j.error || (j.suspended && j.suspended.signal ? `waits for signal "${j.suspended.signal}"` : "");
    return el("tr", { "data-id": j.id, tabindex: "0" },
      el("td", {}, box),
      el("td", { class: "id" }, link(`#/job/${enc(p.topic)}/${enc(j.id)}`, j.id, { class: "job" }), j.ended ? el("span", { class: "badge state-" + j.ended }, j.ended) : ""),
      el("td", { title: iso(at) }, at ? when(at) : "—"),
      el("td", { class: "n" }, String(j.attempts)),
      el("td", {}, j.key ?? ""),
      el("td", {}, el("code", { title: j.version || "" }, short(j.version))),
      el("td", { class: "reason" }, error));
  },
  count() {
    $("#selected-count").textContent = `${this.selected.size} selected`;
    for (const b of $$("#bulk button")) b.disabled = this.selected.size === 0;
  },
  async bulk(action) {
    const ids = [...this.selected];
    const what = { retry: "Retry", cancel: "Cancel (delete)", purge: "Purge for good" }[action];
    if (!ids.length || !confirm(`${what} ${ids.length} job${ids.length === 1 ? "" : "s"} of ${this.p.topic}?`)) return;
    const done = await act("POST", `/topics/${enc(this.p.topic)}/bulk`, { action, ids });
    if (!done) {
      $("#bulk-result").textContent = $("#notice").textContent;
      $("#bulk-result").className = "error";
      return;
    }
    this.selected = new Set(done.missed);
    $("#bulk-result").textContent = `${action}: ${done.done.length} done, ${done.missed.length} left alone`;
    $("#bulk-result").className = "";
    await this.load();
  },
};
