// runsink web UI: copy buttons, tabs, times, the release button and live updates over SSE.
// Everything from the server is put in the page as text (textContent), never as HTML.
"use strict";
(function () {
  const body = document.body;
  const csrf = (document.querySelector('meta[name="runsink-csrf"]') || {}).content || "";

  // -- invisible characters made visible (the server's `visible` filter, for live rows) --
  const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/u;
  function visible(text) {
    const frag = document.createDocumentFragment();
    let plain = "";
    for (const ch of String(text == null ? "" : text)) {
      if (HIDDEN.test(ch)) {
        if (plain) { frag.append(plain); plain = ""; }
        const span = document.createElement("span");
        span.className = "cp";
        span.textContent = "\u27e8U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9";
        frag.append(span);
      } else {
        plain += ch;
      }
    }
    if (plain) frag.append(plain);
    return frag;
  }
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  // -- copy buttons --
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-copy]");
    if (!button) return;
    const text = button.getAttribute("data-copy");
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      const area = el("textarea", { "aria-hidden": "true" }, text);
      body.append(area); area.select(); document.execCommand("copy"); area.remove();
    }
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = label; }, 1200);
  });

  // -- tabs (arrow keys move between them, as the ARIA pattern says) --
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  function select(tab) {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    }
    tab.focus();
  }
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (e) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (step) { e.preventDefault(); select(tabs[(i + step + tabs.length) % tabs.length]); }
      if (e.key === "Home") { e.preventDefault(); select(tabs[0]); }
      if (e.key === "End") { e.preventDefault(); select(tabs[tabs.length - 1]); }
    });
  });

  // -- remote images: only on a click, for this message --
  const remote = document.querySelector("button[data-remote-images]");
  if (remote) {
    remote.addEventListener("click", () => {
      document.querySelector("iframe.mail").src = remote.getAttribute("data-remote-images");
      remote.disabled = true;
      remote.textContent = "Remote images loaded";
    });
  }

  // -- times: lease countdowns and "ago" --
  function human(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  function tick() {
    const now = Date.now() / 1000;
    for (const t of document.querySelectorAll("[data-until]")) {
      const left = parseFloat(t.getAttribute("data-until")) - now;
      t.textContent = left > 0 ? "ends in " + human(left) : "ended";
    }
    for (const t of document.querySelectorAll("time[data-ago]")) {
      const at = Date.parse(t.getAttribute("datetime")) / 1000;
      if (!isNaN(at)) t.textContent = human(now - at) + " ago";
    }
  }
  tick();
  setInterval(tick, 1000);

  // -- release a run (asks first) and sign out: the API, with the CSRF header --
  async function send(method, url) {
    return fetch(url, { method, headers: { "X-Runsink-CSRF": csrf }, credentials: "same-origin" });
  }
  for (const b of document.querySelectorAll("button[data-release]")) {
    b.addEventListener("click", async () => {
      const run = b.getAttribute("data-release");
      if (!window.confirm("Release run " + run + "?\n\nIts live inboxes expire now and the bodies of its mail are deleted. This cannot be undone.")) return;
      const r = await send("DELETE", "/v1/runs/" + encodeURIComponent(run));
      if (r.ok) location.reload(); else window.alert("Release failed: HTTP " + r.status);
    });
  }
  for (const b of document.querySelectorAll("button[data-signout]")) {
    b.addEventListener("click", async () => { await send("POST", "/signout"); location.assign("/signin"); });
  }

  // -- live updates --
  const stream = body.getAttribute("data-stream");
  const live = document.getElementById("live");
  if (!stream || !window.EventSource) return;
  const page = body.getAttribute("data-page");
  const start = parseFloat(body.getAttribute("data-start") || "0");
  const es = new EventSource(stream);
  es.onopen = () => { body.setAttribute("data-live", "open"); if (live) live.textContent = "live"; };
  es.onerror = () => { body.setAttribute("data-live", "retrying"); if (live) live.textContent = "reconnecting…"; };
  function since(iso) {
    const t = Date.parse(iso) / 1000 - start;
    if (t < 60) return "+" + Math.max(0, t).toFixed(3) + " s";
    return "+" + Math.floor(t / 60) + " min " + (t % 60).toFixed(1).padStart(4, "0") + " s";
  }
  function on(type, handler) {
    es.addEventListener(type, (e) => {
      let data;
      try { data = JSON.parse(e.data); } catch (_) { return; }
      handler(data);
    });
  }
  on("resync", () => location.reload());

  if (page === "run" || page === "inbox") {
    const mine = page === "inbox" ? body.getAttribute("data-inbox") : null;
    const list = document.getElementById("messages");
    on("message", (m) => {
      if (!list || (mine && m.inbox_id !== mine) || list.querySelector('[data-message="' + CSS.escape(m.message_id) + '"]')) return;
      const link = el("a", { href: "/messages/" + encodeURIComponent(m.message_id) }, visible(m.subject || "(no subject)"));
      const when = el("time", { datetime: m.received_at }, page === "run" ? since(m.received_at) : m.received_at);
      const td = (label, ...content) => el("td", { "data-label": label }, ...content);
      const cells = page === "run"
        ? [td("Received", when), td("Subject", link), td("From", "\u2014"), td("Inbox", el("a", { href: "/inboxes/" + m.inbox_id }, el("code", {}, m.inbox_id))), td("Claimed", "no")]
        : [td("Received", when), td("Subject", link), td("From", "\u2014"), td("Size", "\u2014"), td("Claimed", "no"), td("Matched", "not yet looked at")];
      const row = el("tr", { "data-message": m.message_id, class: "new" }, ...cells);
      if (list.getAttribute("data-order") === "oldest-first") list.append(row); else list.prepend(row);
      const count = document.getElementById("message-count");
      if (count) count.textContent = String(list.children.length);
    });
    on("inbox", (s) => {
      for (const row of document.querySelectorAll('[data-inbox="' + CSS.escape(s.inbox_id) + '"], [data-inbox-row="' + CSS.escape(s.inbox_id) + '"]')) {
        const badge = row.querySelector("[data-state]");
        if (badge) { badge.textContent = s.state; badge.className = "badge s-" + s.state; }
        const reason = row.querySelector("[data-reason]");
        if (reason) reason.textContent = s.reason || "";
        if (s.state === "expired") for (const t of row.querySelectorAll("[data-until]")) { t.removeAttribute("data-until"); t.textContent = "ended"; }
      }
    });
  }
  if (page === "run") {
    const timeline = document.getElementById("timeline");
    on("run_event", (e) => {
      const item = el("li", { class: "ev ev-" + e.type + " new" }, el("time", { datetime: e.at }, since(e.at)), " ", el("strong", {}, e.type));
      if (e.inbox_id) item.append(" ", el("code", {}, e.inbox_id));
      if (e.message_id) item.append(" ", el("a", { href: "/messages/" + encodeURIComponent(e.message_id) }, el("code", {}, e.message_id)));
      const detail = Object.keys(e.detail || {}).sort().map((k) => k + "=" + JSON.stringify(e.detail[k]).replace(/^"|"$/g, "")).join(" ");
      if (detail) item.append(" ", el("span", { class: "detail" }, visible(detail)));
      timeline.append(item);
      if (e.type === "polled" && e.detail && "attempt" in e.detail) {
        const row = document.querySelector('tr[data-inbox="' + CSS.escape(e.inbox_id) + '"] [data-remaining]');
        if (row && row.textContent) row.textContent = String(Math.max(0, parseInt(row.textContent, 10) - 1));
      }
    });
  }
  // Lists across runs (runs, caught mail): many events can arrive at once, so the table is
  // fetched again (the same page, as rendered by the server) at most once a second.
  const refreshed = body.getAttribute("data-refresh");
  if (refreshed && !new URLSearchParams(location.search).has("before")) {
    let due = null;
    const refresh = async () => {
      due = null;
      const r = await fetch(location.href, { credentials: "same-origin" });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      const fresh = doc.getElementById(refreshed);
      const current = document.getElementById(refreshed);
      if (fresh && current) { current.replaceWith(fresh); tick(); }
    };
    const soon = () => { if (!due) due = setTimeout(refresh, 1000); };
    if (page === "caught") on("message", (m) => { if (m.caught) soon(); });
    else { on("inbox", soon); on("message", soon); }
  }
})();
