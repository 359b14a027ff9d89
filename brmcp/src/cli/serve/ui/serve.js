// The operator page: polls /ui/api/state and draws it.
"use strict";

const DAY = 86400;

function days(st, field) {
  const today = Math.floor(st.now / DAY);
  const out = [];
  for (let d = today - 13; d <= today; d++) out.push({ day: d * DAY, parts: {} });
  for (const r of st.daily || []) {
    const i = Math.floor(r.day / DAY) - (today - 13);
    if (i >= 0 && i < out.length) out[i].parts[r.tool] = (out[i].parts[r.tool] || 0) + r[field];
  }
  return out;
}

function stat(id, v, k) {
  return BR.el("div", { class: "stat" }, BR.el("div", { class: "v", id, text: v }),
               BR.el("div", { class: "k", text: k }));
}

async function refresh() {
  const st = await BR.api("/state");
  const t = st.totals || {};
  document.getElementById("summary").textContent =
    `${st.allowed_callers} allowed caller(s) · ${st.calls_per_minute} calls/min each · ${st.sessions_open} session(s) open`;
  BR.fill("totals",
    stat("earned-24h", (t.earned_atoms_24h || 0).toLocaleString("en-US"), "atoms earned"),
    stat("calls-24h", t.calls_24h || 0, "paid calls"),
    stat("refunds-24h", t.refunds_24h || 0, "refunds"),
    stat("callers", t.callers || 0, "callers with a balance"),
    stat("held", Math.floor((t.balances_matoms || 0) / 1000).toLocaleString("en-US"), "atoms held for callers"));
  BR.chart("revenue-chart", days(st, "earned_atoms"), "atoms");
  BR.chart("calls-chart", days(st, "calls"), "calls");
  const bal = st.balances || [];
  BR.fill("balances", bal.length
    ? BR.table(["Caller", "Balance"], bal.map(b => [
        BR.el("span", { class: "mono", title: b.caller, text: BR.short(b.caller) }),
        (b.matoms / 1000).toLocaleString("en-US") + " atoms"]), [1])
    : BR.el("div", { class: "empty", text: "No caller has a balance yet." }));
  BR.fill("refused", st.refused.length
    ? BR.table(["Caller", "Allowed now"], st.refused.map(r => [
        BR.el("span", { class: "mono", title: r.uid, text: BR.short(r.uid) }),
        r.allowed_now ? "yes" : "no"]))
    : BR.el("div", { class: "empty", text: "No caller was refused since the start." }));
  const j = st.journal || [];
  BR.fill("journal", j.length
    ? BR.table(["#", "When", "Caller", "Tool", "Price", "State"], j.map(e => [
        e.id, BR.time(e.started), BR.el("span", { class: "mono", text: BR.short(e.caller) }),
        e.tool, BR.atoms(e.atoms), BR.pill(e.state)]), [0, 4])
    : BR.el("div", { class: "empty", text: "No paid call yet." }));
  BR.fill("upstreams", st.upstreams.length
    ? BR.table(["Name", "State", "Tools", "Detail"], st.upstreams.map(u => [
        u.name, BR.pill(u.state || "?"), u.tools ?? "",
        BR.el("span", { class: "muted", text: u.error || u.detail || "" })]))
    : BR.el("div", { class: "empty", text: "None: the built-in echo and fortune tools serve." }));
  const counters = Object.entries(st.router).filter(([, v]) => v > 0);
  BR.fill("router", counters.length
    ? BR.table(["Counter", "Value"], counters.map(([k, v]) => [BR.el("code", { text: k }), v]), [1])
    : BR.el("div", { class: "empty", text: "All counters are zero." }));
}

BR.start(refresh, 2000);
