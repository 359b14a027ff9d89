// The bridge page: polls /ui/api/state and draws it; Approve, Deny and the settings
// form post with the session's CSRF token.
"use strict";

let formLoaded = false;
// The ids the waiting list was drawn for: it is redrawn only when they change, so a
// button is never replaced under the user's click.
let drawnPending = null;

function caps(s) {
  return `${s.mode} · ${BR.atoms(s.per_call_cap_atoms)} per call · ${BR.atoms(s.per_day_cap_atoms)} per 24 h`;
}

async function decide(id, approve) {
  try {
    await BR.api(`/payments/${encodeURIComponent(id)}/${approve ? "approve" : "deny"}`, {});
  } catch (e) {
    document.getElementById("status").textContent = "error: " + e.message;
  }
  await refresh();
}

function drawPending(st) {
  const ids = st.pending.map(p => p.id).join(",");
  if (ids === drawnPending) return;
  drawnPending = ids;
  document.getElementById("pending-count").textContent = st.pending.length;
  document.getElementById("pending-count").className = "badge" + (st.pending.length ? " hot" : "");
  if (!st.pending.length) {
    BR.fill("pending", BR.el("div", { class: "empty", text: "No payment is waiting." }));
    return;
  }
  BR.fill("pending", BR.table(["Bot", "Tool", "Amount", "Agent", "Asked", ""],
    st.pending.map(p => [
      p.bot, p.tool, p.quoted ? `${BR.atoms(p.atoms)} (${p.quoted})` : BR.atoms(p.atoms),
      p.agent, BR.time(p.created),
      BR.el("span", {},
        BR.el("button", { class: "approve", type: "button", "data-id": p.id,
                          onclick: () => decide(p.id, true), text: "Approve" }), " ",
        BR.el("button", { class: "deny", type: "button", "data-id": p.id,
                          onclick: () => decide(p.id, false), text: "Deny" })),
    ]), [2]));
}

function drawTotals(st) {
  const s = st.settings;
  BR.fill("totals",
    BR.el("div", { class: "stat" }, BR.el("div", { class: "v", id: "spent-24h", text: st.spent_24h.toLocaleString("en-US") }),
          BR.el("div", { class: "k", text: "atoms spent, last 24 h" })),
    BR.el("div", { class: "stat" }, BR.el("div", { class: "v", text: s.per_day_cap_atoms ? Math.max(0, s.per_day_cap_atoms - st.spent_24h).toLocaleString("en-US") : "0" }),
          BR.el("div", { class: "k", text: "atoms left today" })),
    BR.el("div", { class: "stat" }, BR.el("div", { class: "v", text: st.spend.filter(e => e.status === "paid").length }),
          BR.el("div", { class: "k", text: "payments made" })));
  BR.chart("chart", st.chart, "atoms");
}

function drawBots(st) {
  if (!st.bots.length) {
    BR.fill("bots", BR.el("div", { class: "empty", text: "No bot allowed yet: brmcp bridge bots add NAME UID" }));
    return;
  }
  BR.fill("bots", BR.table(["Bot", "Link", "Tools and prices"], st.bots.map(b => [
    BR.el("div", {}, BR.el("strong", { text: b.name || BR.short(b.uid) }),
          BR.el("div", { class: "mono muted", text: BR.short(b.uid) })),
    BR.el("div", {}, BR.pill(b.state), b.error ? BR.el("div", { class: "muted", text: b.error }) : null),
    b.tools.length
      ? BR.el("ul", { class: "tools" }, b.tools.map(t => BR.el("li", {},
          BR.el("span", {}, BR.el("code", { text: t.name }), t.description ? BR.el("span", { class: "muted", text: " " + t.description }) : null),
          BR.el("span", { class: "mono", text: typeof t.price === "number" ? BR.atoms(t.price) : t.price }))))
      : BR.el("span", { class: "muted", text: "not listed yet (listed at the first agent session)" }),
  ])));
}

function drawAgents(st) {
  BR.fill("agents", BR.table(["Agent", "Per call", "Per 24 h", "Spent 24 h", "Approves"], st.agents.map(a => [
    a.name, BR.atoms(a.per_call_cap_atoms), BR.atoms(a.per_day_cap_atoms), BR.atoms(a.spent_24h),
    a.approver === "agent" ? "you or the agent" : "you only",
  ]), [1, 2, 3]));
}

function drawSpend(st) {
  if (!st.spend.length) {
    BR.fill("spend", BR.el("div", { class: "empty", text: "No payment yet." }));
    return;
  }
  BR.fill("spend", BR.table(["#", "When", "Bot", "Tool", "Agent", "Amount", "Status"],
    st.spend.map(e => [e.id, BR.time(e.ts), e.bot, e.tool, e.agent, BR.atoms(e.atoms),
      BR.el("span", {}, BR.pill(e.status), e.unconfirmed ? BR.el("span", { class: "muted", text: " unconfirmed" }) : null,
            e.err ? BR.el("div", { class: "muted", text: e.err }) : null)]), [0, 5]));
}

function loadForm(s) {
  for (const k of ["mode", "per_call_cap_atoms", "per_day_cap_atoms", "approval_timeout_secs"]) {
    document.getElementById(k).value = s[k];
  }
}

async function refresh() {
  const st = await BR.api("/state");
  document.getElementById("mode-line").textContent = caps(st.settings);
  if (!formLoaded) { loadForm(st.settings); formLoaded = true; }
  drawPending(st);
  drawTotals(st);
  drawBots(st);
  drawAgents(st);
  drawSpend(st);
}

document.getElementById("settings").addEventListener("submit", async ev => {
  ev.preventDefault();
  const msg = document.getElementById("settings-msg");
  const edit = { mode: document.getElementById("mode").value };
  for (const k of ["per_call_cap_atoms", "per_day_cap_atoms", "approval_timeout_secs"]) {
    const raw = document.getElementById(k).value.trim();
    // Sent as typed: the bridge reads it as the file's value and names what is wrong.
    edit[k] = /^\d+$/.test(raw) ? Number(raw) : raw;
  }
  try {
    await BR.api("/settings", edit);
    msg.className = "msg ok"; msg.textContent = "saved to mcpclient.json";
    formLoaded = false;
    await refresh();
  } catch (e) {
    msg.className = "msg error"; msg.textContent = e.message;
  }
});

BR.start(refresh, 1500);
