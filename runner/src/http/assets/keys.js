// Tenants (#/tenants): the topics with fairness, and each account's use
// (GET /api/usage); a topic's keys (#/tenants/TOPIC): the top keys by jobs
// queued and by CPU of the last minute, the rest as "other", each with its
// weight and a pause / resume button; redrawn with every overview.
"use strict";

views.tenants = {
  title: (p) => (p.topic ? `keys of ${p.topic}` : "tenants"),
  render(p, root) {
    this.p = p;
    if (p.topic) {
      this.box = el("div", { id: "keys-box" }, el("p", { class: "muted" }, "loading…"));
      root.append(section(null, el("div", { class: "bar" }, el("h2", {}, "Tenant keys of ", link(`#/topic/${enc(p.topic)}`, p.topic)),
        el("span", { id: "keys-totals", class: "muted" })), this.box));
      this.drawKeys();
      return;
    }
    this.fair = el("ul", { id: "fair-topics" });
    this.usage = el("div", { id: "usage" }, el("p", { class: "muted" }, "loading…"));
    root.append(section("Topics shared fairly by key", this.fair), section("Accounts' use, last 24 h", this.usage));
    this.drawFair();
    api("GET", "/usage?since=24h").then((u) => {
      const rows = u.accounts.map((a) => el("tr", { "data-account": a.account },
        el("td", {}, a.account), el("td", { class: "n" }, String(a.attempts ?? a.usage?.attempts ?? "")),
        el("td", { class: "n" }, ms(a.cpu_us ?? a.usage?.cpu_us ?? 0)),
        el("td", { class: "n" }, bytes((a.bytes_out ?? a.usage?.bytes_out ?? 0) + (a.bytes_in ?? a.usage?.bytes_in ?? 0)))));
      this.usage.replaceChildren(table({ id: "accounts" }, ["account", { text: "attempts", attrs: { class: "n" } },
        { text: "CPU", attrs: { class: "n" } }, { text: "outbound bytes", attrs: { class: "n" } }], rows, "no account used anything"));
    }).catch((e) => this.usage.replaceChildren(el("p", { class: "muted" }, e.message)));
  },
  overview(ov, p) {
    if (p.topic) this.drawKeys();
    else this.drawFair();
  },
  drawFair() {
    if (!state.overview) return;
    const fair = topicsNow().filter((t) => t.fairness);
    this.fair.replaceChildren(...(fair.length ? fair.map((t) => el("li", { "data-topic": t.name }, link(`#/tenants/${enc(t.name)}`, t.name), ` · by ${t.fairness.by || "key"}`))
      : [el("li", { class: "muted" }, "none: a topic with `fairness = { by = \"key\" }` shares its runners by tenant key")]));
  },
  async drawKeys() {
    const topic = this.p.topic;
    let s;
    try {
      s = await api("GET", `/topics/${enc(topic)}/keys?top=10`);
    } catch (e) {
      this.box.replaceChildren(el("p", { class: "error" }, e.message));
      return;
    }
    $("#keys-totals").textContent = `${s.queued} queued · ${s.running} running · ${s.keys_with_jobs} keys with jobs queued`;
    const again = () => this.drawKeys();
    const rows = s.top.map((k) => {
      const path = `/topics/${enc(topic)}/keys/${enc(k.key)}`;
      const toggle = k.paused
        ? el("button", { class: "resume", onclick: () => act("POST", path + "/resume", undefined, again) }, "resume")
        : el("button", { class: "pause", onclick: () => act("POST", path + "/pause", undefined, again) }, "pause");
      const name = el("td", { class: "name" }, k.key === "" ? "(no key)" : k.key);
      if (k.paused) name.append(el("span", { class: "badge" }, "paused"));
      return el("tr", { "data-key": k.key, class: k.paused ? "paused" : "", tabindex: "0" },
        name,
        el("td", { class: "n queued" }, String(k.queued)),
        el("td", { class: "n running" }, String(k.running)),
        el("td", { class: "n cpu" }, ms(k.cpu_us)),
        el("td", { class: "n weight" }, String(k.weight)),
        el("td", {}, k.key === "" ? "" : toggle,
          link(`#/topic/${enc(topic)}/ready?key=${enc(k.key === "" ? "-" : k.key)}`, "jobs", { class: "button" })));
    });
    const sum = (f) => s.top.reduce((n, k) => n + k[f], 0);
    rows.push(el("tr", { "data-key": "(other)", class: "muted" },
      el("td", {}, "other"),
      el("td", { class: "n" }, String(Math.max(0, s.queued - sum("queued")))),
      el("td", { class: "n" }, String(Math.max(0, s.running - sum("running")))),
      el("td", { class: "n" }, ms(Math.max(0, s.cpu_us - sum("cpu_us")))),
      el("td", {}), el("td", {})));
    this.box.replaceChildren(table({ id: "keys" }, ["key", { text: "queued", attrs: { class: "n" } }, { text: "running", attrs: { class: "n" } },
      { text: "CPU last minute", attrs: { class: "n" } }, { text: "weight", attrs: { class: "n" } }, ""], rows));
  },
};
