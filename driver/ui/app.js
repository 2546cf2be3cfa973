// Sluice UI: the queries, query and cluster pages. One server-sent event
// stream per page keeps it live: `overview` every second, and on a query's
// page `query` (its detail) and `progress` (new records). Pages are built
// with textContent only, never from HTML strings.
"use strict";

const ui = (window.sluiceUi = {
  page: "",          // "queries", "query", "cluster", "login"
  updates: 0,        // events applied
  overview: null,
  detail: null,
  records: [],       // the query page's progress records, oldest first
  points: {},        // chart name -> points drawn
  plots: {},         // chart name -> its uPlot
  renderMs: 0,       // time of the last chart redraw
});

let source = null;
let charts = {};

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c != null) el.append(c);
  return el;
}

const $ = (id) => document.getElementById(id);
const fmt = (n, digits = 0) =>
  n == null ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: digits });
// Bytes in binary units, as the CLI shows a state's size: "1.5 KiB".
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
function bytes(n) {
  if (n == null) return "–";
  let v = Number(n), unit = 0;
  while (v >= 1024 && unit + 1 < BYTE_UNITS.length) { v /= 1024; unit++; }
  return unit === 0 ? v + " B" : v.toFixed(1) + " " + BYTE_UNITS[unit];
}
const ago = (ms) => (ms == null ? "–" : ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s");
const time = (ms) => (ms == null ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", ""));
// The watermark of the batch that ends a bounded query is the largest
// bigint, past any date.
const END_OF_TIME = 8.64e15;
const watermark = (ms) => (ms != null && ms >= END_OF_TIME ? "end of input" : time(ms));

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  if (hash.startsWith("query/")) return { page: "query", name: hash.slice(6) };
  if (hash === "cluster") return { page: "cluster" };
  return { page: "queries" };
}

async function start() {
  const session = await fetch("/ui/api/session").then((r) => r.json());
  $("logout").hidden = !session.auth || !session.role;
  if (session.auth && !session.role) return showLogin("");
  show(route());
}

function showLogin(message) {
  if (source) source.close();
  ui.page = "login";
  const input = h("input", { id: "token", type: "password", autocomplete: "off", placeholder: "token" });
  const error = h("p", { id: "login-error", class: "error", text: message });
  const form = h("form", { id: "login", class: "card", onsubmit: async (e) => {
    e.preventDefault();
    const r = await fetch("/ui/api/login", { method: "POST", body: input.value });
    if (r.ok) return start();
    error.textContent = (await r.json()).error;
  } }, h("h2", { text: "Sign in" }),
    h("p", { text: "This driver requires a token with the viewer or admin role." }),
    input, h("button", { type: "submit", text: "Sign in" }), error);
  $("main").replaceChildren(form);
}

function show(r) {
  if (source) source.close();
  charts = {};
  ui.page = r.page;
  ui.detail = null;
  ui.records = [];
  ui.points = {};
  ui.plots = {};
  for (const id of ["nav-queries", "nav-cluster"]) $(id).classList.remove("active");
  if (r.page === "query") {
    $("main").replaceChildren(queryPage(r.name));
    source = new EventSource("/ui/events/" + encodeURIComponent(r.name));
  } else {
    $(r.page === "cluster" ? "nav-cluster" : "nav-queries").classList.add("active");
    $("main").replaceChildren(h("div", { id: "page" }));
    source = new EventSource("/ui/events");
  }
  source.addEventListener("overview", (e) => applied(() => overview(JSON.parse(e.data))));
  source.addEventListener("query", (e) => applied(() => detail(JSON.parse(e.data))));
  source.addEventListener("progress", (e) => applied(() => progress(JSON.parse(e.data))));
  source.addEventListener("error", (e) => {
    if (!e.data) return; // a dropped connection: EventSource reconnects by itself
    const why = JSON.parse(e.data).error;
    source.close();
    if (/token/.test(why)) return showLogin(why);
    $("main").prepend(h("p", { class: "error", id: "stream-error", text: why }));
  });
  source.onopen = () => { $("conn").textContent = "live"; $("conn").className = "conn live"; };
  source.onerror = () => { $("conn").textContent = "reconnecting"; $("conn").className = "conn down"; };
}

function applied(f) {
  f();
  ui.updates++;
}

function overview(o) {
  ui.overview = o;
  const badge = $("role-badge");
  badge.textContent = o.role === "leader" ? `leader · epoch ${o.epoch}` : o.role;
  badge.className = "badge " + o.role;
  $("standby-banner").hidden = o.role !== "standby";
  const where = $("leader-where");
  if (o.leader_ui) {
    where.replaceChildren("The leader's UI is at ", h("a", { id: "leader-link", href: o.leader_ui + "/", text: o.leader_ui }), ".");
  } else {
    where.textContent = o.leader ? `The leader is at ${o.leader}.` : "No leader is known yet.";
  }
  if (ui.page === "queries") $("page").replaceChildren(queriesView(o));
  if (ui.page === "cluster") $("page").replaceChildren(clusterView(o));
  if (ui.page === "query") stopButton();
}

function queriesView(o) {
  if (o.role !== "leader") return h("p", { class: "muted", text: "Queries are shown by the leader." });
  const head = ["query", "state", "last batch", "rows committed", "input rows/s", "processed rows/s", "last batch took", "error"];
  const rows = o.queries.map((q) => h("tr", { "data-query": q.name },
    h("td", {}, h("a", { href: "#/query/" + encodeURIComponent(q.name), text: q.name })),
    h("td", { class: "state " + q.state, text: q.state }),
    h("td", { class: "last-batch num", text: q.last_batch < 0 ? "–" : String(q.last_batch) }),
    h("td", { class: "num", text: fmt(q.committed_rows) }),
    h("td", { class: "in-rate num", text: fmt(q.input_rows_per_second, 1) }),
    h("td", { class: "proc-rate num", text: fmt(q.processed_rows_per_second, 1) }),
    h("td", { class: "num", text: q.last_batch < 0 ? "–" : q.last_batch_ms + " ms" }),
    h("td", { class: "error", text: q.error })));
  return h("section", {}, h("h1", { text: "Queries" }),
    o.queries.length ? table("queries", head, rows) : h("p", { class: "muted", text: "No queries yet." }));
}

function clusterView(o) {
  const execs = o.executors.map((e) => h("tr", { "data-executor": e.id },
    h("td", { text: e.id }), h("td", { class: "slots num", text: String(e.slots) }),
    h("td", { class: "running num", text: String(e.running_tasks) }),
    h("td", { class: "heartbeat num", text: ago(e.heartbeat_age_ms) }),
    h("td", { class: "error", text: e.conflict })));
  const standbys = o.standbys.map((s) => h("li", { text: s }));
  return h("section", {}, h("h1", { text: "Cluster" }),
    h("dl", { class: "facts" },
      h("dt", { text: "this driver" }), h("dd", { id: "c-driver", text: o.driver_id }),
      h("dt", { text: "leader" }), h("dd", { id: "c-leader", text: o.leader || "unknown" }),
      h("dt", { text: "epoch" }), h("dd", { id: "c-epoch", text: o.epoch == null ? "–" : String(o.epoch) })),
    h("h2", { text: "Standby drivers" }),
    standbys.length ? h("ul", { id: "c-standbys" }, ...standbys) : h("p", { class: "muted", id: "c-standbys", text: o.role === "leader" ? "None." : "Shown by the leader." }),
    h("h2", { text: "Executors" }),
    table("executors", ["executor", "slots", "running tasks", "heartbeat age", "conflict"], execs));
}

function table(id, head, rows) {
  return h("table", { id }, h("thead", {}, h("tr", {}, ...head.map((t) => h("th", { text: t })))), h("tbody", {}, ...rows));
}

function queryPage(name) {
  const chart = (kind) => h("div", { class: "chart", id: "chart-" + kind });
  const fact = (id, label) => [h("dt", { text: label }), h("dd", { id, text: "–" })];
  return h("section", { id: "query", "data-query": name },
    h("div", { class: "title" }, h("h1", { text: name }), h("span", { id: "q-state", class: "state" }),
      h("button", { id: "stop", type: "button", hidden: "", onclick: stopQuery, text: "Stop query" })),
    h("dl", { class: "facts" }, ...fact("q-last-batch", "last batch"), ...fact("q-input-rows", "its input rows"),
      ...fact("q-in-rate", "input rows/s"), ...fact("q-proc-rate", "processed rows/s"),
      ...fact("q-state-rows", "state rows"), ...fact("q-watermark", "watermark"),
      ...fact("q-committed", "rows committed")),
    h("p", { id: "q-error", class: "error" }),
    h("div", { class: "charts" }, chart("rates"), chart("phases"), chart("state"), chart("watermark")),
    h("div", { id: "q-operators-box", hidden: "" }, h("h2", { text: "State by operator" }),
      table("q-operators", ["operator", "state rows", "state bytes"], [])),
    h("h2", { text: "Last batches" }), table("q-progress", ["batch", "epoch", "committed at", "input rows", "input rows/s", "processed rows/s", "took", "state rows", "watermark"], []),
    h("h2", { text: "Recent errors" }), h("ul", { id: "q-errors" }),
    h("h2", { text: "SQL" }), h("pre", { id: "q-sql" }),
    h("h2", { text: "Spec" }), h("pre", { id: "q-spec" }));
}

function detail(d) {
  ui.detail = d;
  $("q-state").textContent = d.state;
  $("q-state").className = "state " + d.state;
  $("q-committed").textContent = fmt(d.committed_rows);
  $("q-error").textContent = d.error;
  $("q-sql").textContent = d.sql;
  $("q-spec").textContent = d.spec;
  $("q-errors").replaceChildren(...(d.errors.length ? d.errors.slice().reverse().map((e) =>
    h("li", {}, h("span", { class: "muted", text: time(e.at_ms) + " " }), e.message)) : [h("li", { class: "muted", text: "None." })]));
  $("chart-watermark").hidden = !d.watermark;
  stopButton();
}

function stopButton() {
  const d = ui.detail, o = ui.overview;
  const b = $("stop");
  if (b) b.hidden = !d || !o || o.access !== "admin" || d.state !== "RUNNING";
}

async function stopQuery() {
  const name = $("query").dataset.query;
  if (!confirm(`Stop query ${name}? It can not be resumed.`)) return;
  const r = await fetch("/ui/api/queries/" + encodeURIComponent(name) + "/stop", { method: "POST" });
  if (!r.ok) $("q-error").textContent = (await r.json()).error;
}

function progress(p) {
  ui.records = p.reset ? p.records : ui.records.concat(p.records);
  if (ui.records.length > SluiceCharts.MAX_POINTS) ui.records = ui.records.slice(-SluiceCharts.MAX_POINTS);
  const rs = ui.records;
  const last = rs[rs.length - 1];
  if (last) {
    $("q-last-batch").textContent = String(last.batch_id);
    $("q-input-rows").textContent = fmt(last.num_input_rows);
    $("q-in-rate").textContent = fmt(last.input_rows_per_second, 1);
    $("q-proc-rate").textContent = fmt(last.processed_rows_per_second, 1);
    $("q-state-rows").textContent = fmt(last.state_rows_total);
    $("q-watermark").textContent = watermark(last.watermark_ms);
  }
  // A stateless query has no state: its state chart and operators stay hidden.
  $("chart-state").hidden = !rs.some((r) => r.state_rows_total > 0);
  operators(last);
  const t0 = performance.now();
  for (const kind of ["rates", "phases", "state", "watermark"]) {
    if (!charts[kind]) charts[kind] = SluiceCharts.create(kind, $("chart-" + kind));
    charts[kind].update(rs);
    ui.points[kind] = charts[kind].plot.data[0].length;
    ui.plots[kind] = charts[kind].plot;
  }
  // uPlot draws on the next frame: time the update up to it.
  requestAnimationFrame(() => { ui.renderMs = performance.now() - t0; });
  const rows = rs.slice(-20).reverse().map((r) => h("tr", { "data-batch": String(r.batch_id) },
    h("td", { class: "num", text: String(r.batch_id) }), h("td", { class: "num", text: String(r.epoch) }),
    h("td", { text: time(r.timestamp_ms) }), h("td", { class: "input-rows num", text: fmt(r.num_input_rows) }),
    h("td", { class: "num", text: fmt(r.input_rows_per_second, 1) }),
    h("td", { class: "num", text: fmt(r.processed_rows_per_second, 1) }),
    h("td", { class: "num", text: r.duration_ms.total + " ms" }), h("td", { class: "num", text: fmt(r.state_rows_total) }),
    h("td", { text: watermark(r.watermark_ms) })));
  $("q-progress").querySelector("tbody").replaceChildren(...rows);
}

// Each state operator's state after the latest batch (a record from
// before operators were recorded has none).
function operators(last) {
  const ops = (last && last.state_operators) || [];
  $("q-operators-box").hidden = !ops.length;
  $("q-operators").querySelector("tbody").replaceChildren(...ops.map((o) => h("tr", { "data-operator": o.name },
    h("td", { text: o.name }), h("td", { class: "rows num", text: fmt(o.rows) }),
    h("td", { class: "bytes num", title: fmt(o.bytes) + " bytes", text: bytes(o.bytes) }))));
}

$("logout").addEventListener("click", async () => {
  await fetch("/ui/api/logout", { method: "POST" });
  start();
});
window.addEventListener("hashchange", () => { if (ui.page !== "login") show(route()); });
window.addEventListener("resize", () => {
  for (const c of Object.values(charts)) {
    c.plot.setSize(SluiceCharts.size(c.plot.root.parentNode));
  }
});
start();
