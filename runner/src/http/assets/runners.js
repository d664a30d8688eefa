// Runners (#/runners): the live runners (what each runs, its version, jobs
// in flight, since when), live from the stream; this server's recent reloads.
"use strict";

views.runners = {
  title: () => "runners",
  render(p, root) {
    this.box = el("div", { id: "runners-box" });
    this.reloads = el("ul", { id: "reloads" });
    root.append(section("Runners", this.box), section("Recent reloads", this.reloads));
    this.overview(state.overview);
    api("GET", "/reloads").then((r) => {
      const items = r.reloads.slice(0, 20).map((x) => el("li", {},
        el("span", { class: "muted" }, ago(x.at_ms) + " "), x.result.replace("_", " "),
        x.path ? " " + x.path.split("/").pop() : "", x.detail ? el("div", { class: "muted" }, x.detail.slice(0, 200)) : ""));
      this.reloads.replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "none since this runner started")]));
    }).catch((e) => this.reloads.replaceChildren(el("li", { class: "error" }, e.message)));
  },
  overview(ov) {
    if (!ov || !this.box) return;
    const rows = ov.runners.map((r) => el("tr", { "data-runner": r.id, tabindex: "0" },
      el("td", {}, el("code", {}, r.id)),
      el("td", {}, r.host),
      el("td", {}, r.version),
      el("td", { class: "n" }, String(r.in_flight)),
      el("td", { title: iso(r.started_at_ms) }, span(Date.now() - r.started_at_ms)),
      el("td", {}, ago(r.seen_at_ms)),
      el("td", { class: "reason" }, r.topics.map((t, i) => [i ? ", " : "", link(`#/topic/${enc(t)}`, t)])),
      el("td", { class: "reason error" }, (r.missing || []).join(", "))));
    this.box.replaceChildren(table({ id: "runners" }, ["runner", "host", "version", { text: "in flight", attrs: { class: "n" } }, "up", "seen", "topics", "missing handlers"],
      rows, "no runner alive"));
  },
};
