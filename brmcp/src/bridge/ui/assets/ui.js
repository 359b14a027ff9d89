// The local pages' shared script: login, the JSON API client, DOM building (text only,
// never HTML from data), number formats and the stacked bar chart (inline SVG).
//
// The session: the login answers a token, kept in this origin's sessionStorage (per
// scheme, host and port, so no other local server's page reads it, and gone with the
// tab) under the page's own key, and sent in X-Brmcp-Session on every API request.
// No cookie: a cookie would reach every port of the host.
"use strict";

const BR = {
  storeKey(page) { return "brmcp." + page + ".session"; },

  token() {
    try { return sessionStorage.getItem(BR.storeKey(document.body.dataset.page)); }
    catch (e) { return null; }
  },

  forget() {
    try { sessionStorage.removeItem(BR.storeKey(document.body.dataset.page)); } catch (e) {}
  },
  palette: ["#2f6fde", "#1f9d55", "#c98a00", "#8e44ad", "#d64545", "#16a2b8",
            "#e67e22", "#5d6d7e", "#27ae60", "#b03a8a"],

  el(tag, attrs, ...children) {
    const svg = ["svg", "rect", "text", "line", "g", "title"].includes(tag);
    const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag)
                     : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "onclick") node.addEventListener("click", v);
      else if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  },

  fill(id, ...children) {
    const node = document.getElementById(id);
    node.replaceChildren(...children.flat());
    return node;
  },

  atoms(n) {
    if (n === null || n === undefined) return "–";
    return Number(n).toLocaleString("en-US") + " atoms";
  },

  dcr(n) { return (Number(n) / 1e8).toFixed(8).replace(/0+$/, "").replace(/\.$/, "") + " DCR"; },

  time(ts) {
    if (!ts) return "–";
    const d = new Date(ts * 1000);
    return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  },

  short(uid) { return uid && uid.length > 16 ? uid.slice(0, 8) + "…" + uid.slice(-6) : uid; },

  pill(state) { return BR.el("span", { class: "pill " + state, text: state }); },

  table(head, rows, numeric) {
    const num = new Set(numeric || []);
    return BR.el("table", {},
      BR.el("thead", {}, BR.el("tr", {}, head.map((h, i) =>
        BR.el("th", { class: num.has(i) ? "num" : null, text: h })))),
      BR.el("tbody", {}, rows.map(r => BR.el("tr", {}, r.map((c, i) =>
        BR.el("td", { class: num.has(i) ? "num" : null }, c))))));
  },

  headers() {
    const token = BR.token();
    return token ? { "X-Brmcp-Session": token } : {};
  },

  async api(path, body) {
    const opts = { credentials: "omit", cache: "no-store", headers: BR.headers() };
    if (body !== undefined) {
      opts.method = "POST";
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch("/ui/api" + path, opts);
    const text = await r.text();
    if (r.status === 401) { BR.loggedOut(text); throw new Error(text); }
    if (!r.ok) throw new Error(text || r.statusText);
    return text ? JSON.parse(text) : null;
  },

  // Ended (logged out, idle, a rotated secret, or never logged in in this tab): say
  // how to log in, and stop asking.
  loggedOut(why) {
    BR.forget();
    BR.stopped = true;
    document.body.classList.add("logged-out");
    const s = document.getElementById("status");
    if (s) s.textContent = "logged out · " + (why || "open a new login URL");
  },

  async start(refresh, every) {
    const out = document.getElementById("logout");
    if (out) out.addEventListener("click", async () => {
      await fetch("/ui/logout", { method: "POST", credentials: "omit", cache: "no-store",
                                  headers: BR.headers() });
      BR.loggedOut("you logged out");
    });
    try { await BR.api("/session"); } catch (e) { return; }
    let timer = null;
    const tick = async () => {
      if (BR.stopped) { clearInterval(timer); return; }
      try {
        await refresh();
        const s = document.getElementById("status");
        if (s) s.textContent = "live · " + new Date().toLocaleTimeString("en-GB");
      } catch (e) {
        if (BR.stopped) return;
        const s = document.getElementById("status");
        if (s) s.textContent = "error: " + e.message;
      }
    };
    await tick();
    timer = setInterval(tick, every || 1500);
  },

  // Stacked bars: days = [{day: unix secs, parts: {series: value}}].
  chart(id, days, unit) {
    const series = [...new Set(days.flatMap(d => Object.keys(d.parts)))].sort();
    const color = s => BR.palette[series.indexOf(s) % BR.palette.length];
    const totals = days.map(d => Object.values(d.parts).reduce((a, b) => a + b, 0));
    const top = Math.max(0, ...totals);
    // A round top for the axis, in whole steps of four.
    let max = 4;
    if (top > 4) {
      const p = Math.pow(10, Math.floor(Math.log10(top)));
      max = [1, 2, 2.5, 4, 5, 10].map(f => f * p).find(v => v >= top && Number.isInteger(v / 4)) || top;
    }
    const W = 720, H = 220, L = 64, B = 24, T = 10;
    const bw = (W - L - 8) / Math.max(1, days.length);
    const svg = BR.el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
                               "aria-label": "chart of " + unit + " per day" });
    for (let i = 0; i <= 4; i++) {
      const v = max * i / 4, y = H - B - (H - B - T) * i / 4;
      svg.append(BR.el("line", { x1: L, x2: W - 4, y1: y, y2: y, stroke: "#e3e7ee" }));
      svg.append(BR.el("text", { x: L - 6, y: y + 3, "text-anchor": "end", class: "axis",
                                 text: Math.round(v).toLocaleString("en-US") }));
    }
    days.forEach((d, i) => {
      let y = H - B;
      const x = L + i * bw + bw * 0.15;
      for (const s of series) {
        const v = d.parts[s] || 0;
        if (!v) continue;
        const h = (H - B - T) * v / max;
        y -= h;
        svg.append(BR.el("rect", { x, y, width: bw * 0.7, height: Math.max(h, 1),
                                   fill: color(s), "data-series": s, "data-value": v },
          BR.el("title", { text: `${s}: ${v.toLocaleString("en-US")} ${unit}` })));
      }
      if (days.length <= 16 || i % 2 === 0) {
        const label = new Date(d.day * 1000).toISOString().slice(5, 10);
        svg.append(BR.el("text", { x: x + bw * 0.35, y: H - 8, "text-anchor": "middle",
                                   class: "axis", text: label }));
      }
    });
    const legend = BR.el("div", { class: "legend" }, series.length ? series.map(s => {
      const sw = BR.el("span", { class: "sw" });
      sw.style.background = color(s);
      return BR.el("span", {}, sw, s);
    }) : BR.el("span", { class: "muted", text: "nothing yet in the last " + days.length + " days" }));
    BR.fill(id, svg, legend);
  },
};

// The login page: the code is in the URL's fragment, which no request carries; it is
// taken out of the address bar and history at once, posted once (it works once
// anyway), and the session token answered is kept for the page it belongs to.
if (document.body && document.body.dataset.page === "login") {
  const code = decodeURIComponent(location.hash.slice(1));
  history.replaceState(null, "", location.pathname);
  const status = document.getElementById("login-status");
  if (!code) {
    status.textContent = "No login code in the URL.";
  } else {
    fetch("/ui/login", {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code }),
    }).then(async r => {
      if (!r.ok) { status.textContent = await r.text(); return; }
      const session = await r.json();
      sessionStorage.setItem(BR.storeKey(session.page), session.token);
      location.replace("/ui/");
    }).catch(e => { status.textContent = "login failed: " + e.message; });
  }
}
