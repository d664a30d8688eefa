// Rollouts (#/rollouts): each topic's stable version and canary; a topic's
// (#/rollouts/TOPIC): stable and canary side by side (share, attempts,
// failure rate over the window, crashes), the pin, the policy and the last
// verdict, and every kept version with a pin button.
"use strict";

const MOST_ROLLOUTS = 50; // topics whose rollout the list reads at once

views.rollouts = {
  title: (p) => (p.topic ? `versions of ${p.topic}` : "rollouts"),
  render(p, root) {
    this.p = p;
    this.box = el("div", { id: "rollout-box" }, el("p", { class: "muted" }, "loading…"));
    root.append(section(null, el("div", { class: "bar" },
      el("h2", {}, p.topic ? ["Versions of ", link(`#/topic/${enc(p.topic)}`, p.topic)] : "Rollouts"),
      el("span", { id: "rollout-actions" })), this.box));
    this.draw();
  },
  // the list again with the first overview, then every 10 s (a read per topic)
  overview() {
    if (!this.p.topic && (!this.drawnAt || Date.now() - this.drawnAt > 10000)) this.draw();
  },
  async draw() {
    try {
      if (this.p.topic) await this.drawTopic(this.p.topic);
      else await this.drawAll();
    } catch (e) {
      this.box.replaceChildren(el("p", { class: "error" }, e.message));
    }
  },
  async drawAll() {
    if (!state.overview) return;
    this.drawnAt = Date.now();
    const names = topicsNow().map((t) => t.name).slice(0, MOST_ROLLOUTS);
    const all = await Promise.all(names.map((n) => api("GET", `/topics/${enc(n)}/rollout`).catch(() => null)));
    const rows = names.map((n, i) => {
      const r = all[i] && all[i].rollout;
      const c = r && r.canary;
      return el("tr", { "data-topic": n, tabindex: "0" },
        el("td", {}, link(`#/rollouts/${enc(n)}`, n)),
        el("td", {}, el("code", {}, r ? short(r.stable) : "—")),
        el("td", {}, c ? [el("code", {}, short(c.version)), ` ${Math.round(c.share * 100)}%`] : el("span", { class: "muted" }, "none")),
        el("td", { class: "n" }, c ? `${percent(c.stable_tally.failures, c.stable_tally.attempts)} / ${percent(c.tally.failures, c.tally.attempts)}` : "—"),
        el("td", {}, r && r.pinned ? el("code", {}, short(r.pinned.version)) : ""));
    });
    this.box.replaceChildren(table({ id: "rollouts" }, ["topic", "stable", "canary", { text: "failure rate stable / canary", attrs: { class: "n" } }, "pinned"], rows));
  },
  async drawTopic(topic) {
    const path = `/topics/${enc(topic)}`;
    const [kept, status] = await Promise.all([api("GET", path + "/versions"), api("GET", path + "/rollout")]);
    const r = status.rollout;
    const c = r.canary;
    const again = () => this.draw();
    $("#rollout-actions").replaceChildren(
      c ? el("button", { id: "rollout-promote", onclick: () => confirm(`Promote the canary of ${topic}? It serves every attempt from now.`) && act("POST", path + "/rollout/promote", undefined, again) }, "promote canary") : "",
      c ? el("button", { id: "rollout-abort", class: "danger", onclick: () => confirm(`Abort the canary of ${topic}? It is retired and not rolled out again.`) && act("POST", path + "/rollout/abort", undefined, again) }, "abort canary") : "",
      r.pinned ? el("button", { id: "unpin", onclick: () => act("DELETE", path + "/pin", undefined, again) }, "unpin") : "");
    // with a canary, both sides count since it started; without, since first seen
    const stableKept = kept.versions.find((v) => v.version === r.stable);
    const stable = c ? c.stable_tally : stableKept ? stableKept.tally : null;
    const share = (s) => (r.pinned ? "— (pinned)" : Math.round(s * 100) + "%");
    const side = (label, cls, a, b) => el("tr", { class: cls }, el("th", {}, label), el("td", {}, a), el("td", {}, b));
    const sides = el("table", { id: "rollout", class: "side" }, el("thead", {}, el("tr", {}, el("th", {}), el("th", {}, "stable"), el("th", {}, "canary"))),
      el("tbody", {},
        side("version", "version", el("code", {}, r.stable || "— (no runner has reported yet)"), c ? el("code", {}, c.version) : el("span", { class: "muted" }, "none")),
        side("share of attempts", "share", share(c ? 1 - c.share : 1), c ? share(c.share) : "—"),
        side("attempts", "attempts", stable ? String(stable.attempts) : "—", c ? String(c.tally.attempts) : "—"),
        side("failure rate", "failures", stable ? percent(stable.failures, stable.attempts) : "—", c ? percent(c.tally.failures, c.tally.attempts) : "—"),
        side("crashes", "crashes", stable ? String(stable.crashes) : "—", c ? String(c.tally.crashes) : "—"),
        side("window ends", "ends", "—", c ? el("span", { title: iso(c.ends_ms) }, when(c.ends_ms)) : "—")));
    const notes = [];
    if (r.pinned) notes.push(el("li", { class: "pinned" }, "pinned to ", el("code", {}, r.pinned.version), ` by ${r.pinned.by}, ${ago(r.pinned.at_ms)}: it serves every attempt`));
    const pol = status.policy;
    notes.push(el("li", { class: "policy" }, pol
      ? `policy: canary ${Math.round(pol.canary * 100)}% for ${span(pol.window_ms)}, at least ${pol.min_attempts} attempts, ` +
        `failure rate at most ${Math.round(pol.max_failure_rate * 100)}% and within ${Math.round(pol.margin * 100)} points of stable`
      : "policy: none in queues.toml, a new version replaces the old at once"));
    if (r.last) notes.push(el("li", { class: "verdict" }, "last verdict: ", el("code", {}, r.last.version), ` ${r.last.result.replace("_", " ")} by ${r.last.by}, ${ago(r.last.at_ms)}: ${r.last.reason}`));
    const rows = kept.versions.map((v) => el("tr", { "data-version": v.version, tabindex: "0" },
      el("td", {}, el("code", {}, v.version)),
      el("td", {}, el("span", { class: "role " + v.role }, v.role)),
      el("td", { class: "n" }, String(v.tally.attempts)),
      el("td", { class: "n" }, percent(v.tally.failures, v.tally.attempts)),
      el("td", { class: "n" }, String(v.tally.crashes)),
      // the live jobs per version (issue 68's `versions TOPIC`) go here
      el("td", { class: "n live-jobs muted" }, v.live_jobs == null ? "—" : String(v.live_jobs)),
      el("td", { title: iso(v.first_seen_ms) }, ago(v.first_seen_ms)),
      el("td", {}, v.role === "pinned" ? "" : el("button", { class: "pin", onclick: () => confirm(`Pin ${topic} to ${v.version}? Every attempt runs it until you unpin.`) && act("POST", path + "/pin", { version: v.version }, again) }, "pin"))));
    this.box.replaceChildren(sides, el("ul", { id: "rollout-notes" }, notes), el("h3", {}, "Kept versions, newest first"),
      table({ id: "versions" }, ["version", "role", { text: "attempts", attrs: { class: "n" } }, { text: "failed", attrs: { class: "n" } },
        { text: "crashed", attrs: { class: "n" } }, { text: "live jobs", attrs: { class: "n" } }, "first seen", ""], rows,
      "none yet: a runner records each version it loads"));
  },
};
