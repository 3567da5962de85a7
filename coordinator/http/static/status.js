// The status page: reads GET /v1/overview every few seconds and draws it.
// No library: the charts are SVG built here, every text goes in as
// textContent (names come from clients, never as HTML).
"use strict";

const TOKEN_KEY = "coordinator-token";
const SVG = "http://www.w3.org/2000/svg";
const STATES = ["committed", "rolled_back", "discarded", "expired"];
const params = new URLSearchParams(location.search);
// ?refresh=SECONDS (at least 1) and ?minutes=N (the chart's window, 1 to 120)
const REFRESH_MS = Math.max(1, Number(params.get("refresh")) || 3) * 1000;
const MINUTES = Math.min(120, Math.max(1, Number(params.get("minutes")) || 30));

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function count(n) {
  return n.toLocaleString("en-US");
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${String(m % 60).padStart(2, "0")} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

// Bytes in binary units, one decimal from KiB up.
function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function hhmm(iso) {
  const d = new Date(iso);
  return `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
}

function svg(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  return element;
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function fill(tableId, items, emptyId, addRow) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const item of items) addRow(body.insertRow(), item);
  $(tableId).hidden = items.length === 0;
  $(emptyId).hidden = items.length !== 0;
}

// A nice round step for an axis from 0 to `top` in about four steps.
function step(top) {
  const raw = Math.max(top, 1) / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = [1, 2, 5, 10].find((f) => f * power >= raw) * power;
  return Math.max(1, unit);
}

// Stacked bars of the resolutions of each minute, with a light line of the
// ones answered by check-back.
function drawRates(minutes) {
  const width = 900, height = 220, left = 44, right = 20, bottom = 22, top = 8;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "rates" });
  const totals = minutes.map((m) => STATES.reduce((sum, s) => sum + m[s], 0));
  const unit = step(Math.max(...totals, 1));
  const ceiling = Math.ceil(Math.max(...totals, 1) / unit) * unit;
  const plotHeight = height - bottom - top;
  const y = (v) => top + plotHeight - (v / ceiling) * plotHeight;
  for (let v = 0; v <= ceiling; v += unit) {
    chart.append(svg("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }));
    chart.append(svg("text", { x: left - 6, y: y(v) + 4, class: "axis end" }, count(v)));
  }
  const slot = (width - left - right) / Math.max(minutes.length, 1);
  const bar = Math.max(2, slot * 0.75);
  minutes.forEach((m, i) => {
    const x = left + i * slot + (slot - bar) / 2;
    let base = 0;
    for (const state of STATES) {
      if (m[state] > 0) {
        const rect = svg("rect", {
          x, width: bar, y: y(base + m[state]), height: y(base) - y(base + m[state]),
          class: state,
        });
        rect.append(svg("title", {}, `${hhmm(m.minute)} ${state.replace("_", " ")}: ${count(m[state])}`));
        chart.append(rect);
        base += m[state];
      }
    }
    if (m.by_check > 0) {
      chart.append(svg("rect", { x, width: bar, y: y(m.by_check) - 1.5, height: 3, class: "by_check" }));
    }
    const every = Math.ceil(minutes.length / 10);
    if ((minutes.length - 1 - i) % every === 0) {
      chart.append(svg("text", { x: x + bar / 2, y: height - 6, class: "axis middle" }, hhmm(m.minute)));
    }
  });
  $("rates-chart").replaceChildren(chart);
}

// One horizontal bar per age bucket, the count at its end.
function drawAges(buckets) {
  const width = 440, row = 30, left = 96, height = buckets.length * row + 4;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "ages" });
  const most = Math.max(...buckets.map((b) => b.messages), 1);
  buckets.forEach((b, i) => {
    const y = 2 + i * row;
    const group = svg("g", { "data-bucket": i });
    group.append(svg("text", { x: left - 8, y: y + 19, class: "axis end" }, b.label));
    const length = ((width - left - 60) * b.messages) / most;
    group.append(svg("rect", { x: left, y: y + 4, width: Math.max(length, 1), height: row - 10,
      class: i >= 3 ? "old" : "young" }));
    group.append(svg("text", { x: left + length + 6, y: y + 19, class: "count" }, count(b.messages)));
    chart.append(group);
  });
  $("age-chart").replaceChildren(chart);
}

// Each table's size, rows and oldest row, a bar of its size beside it; the
// last retention round of the node that answered; the idle consumer groups.
function showStorage(storage, at) {
  const tables = storage ? storage.tables : [];
  const most = Math.max(...tables.map((t) => t.bytes), 1);
  fill("tables", tables, "tables-empty", (tr, t) => {
    tr.dataset.table = t.table;
    cell(tr, t.table, "name");
    const bytes = cell(tr, size(t.bytes), "n");
    bytes.dataset.field = "bytes";
    bytes.dataset.bytes = t.bytes;
    bytes.title = `${count(t.bytes)} bytes`;
    const bar = svg("svg", { viewBox: "0 0 100 12", preserveAspectRatio: "none" });
    bar.append(svg("rect", { x: 0, y: 1, height: 10, width: Math.max((100 * t.bytes) / most, 0.5) }));
    tr.insertCell().className = "bar";
    tr.cells[2].append(bar);
    cell(tr, count(t.rows), "n").dataset.field = "rows";
    const oldest = cell(tr, t.oldest_age_seconds === null ? "empty" : age(t.oldest_age_seconds), "n");
    oldest.dataset.field = "oldest_age";
  });
  const round = storage ? storage.last_round : null;
  const line = $("last-round");
  if (round) {
    const when = round.started_at ? new Date(round.started_at).toLocaleTimeString() : "failed";
    const ago = round.started_at ? `, ${age((new Date(at) - new Date(round.started_at)) / 1000)} ago` : "";
    line.textContent = `started ${when}${ago}, took ${round.duration_seconds.toFixed(3)} s; removed:`;
    line.className = "round";
  } else if (storage && !storage.retention_enabled) {
    line.textContent = "Retention is disabled on this node (retention_enabled = false): " +
      "its rounds remove nothing. Another node may run them.";
    line.className = "round none";
  } else {
    line.textContent = "This node has not run a retention round yet: it runs one when it " +
      "starts, then every retention_interval_seconds.";
    line.className = "round none";
  }
  $("removed").hidden = !round;
  for (const kind of ["messages", "unacked_deliveries", "dead_letters", "consumer_groups"]) {
    $(`removed-${kind}`).textContent = round ? count(round.removed[kind] || 0) : "0";
  }
  $("removed-consumer_groups").title = round ? round.removed_consumer_groups.join(", ") : "";
  const idle = storage ? storage.idle_consumer_groups : [];
  fill("idle-groups", idle, "idle-groups-empty", (tr, g) => {
    tr.dataset.group = g.consumer_group;
    cell(tr, g.consumer_group, "name");
    cell(tr, `${age((new Date(at) - new Date(g.last_received_at)) / 1000)} ago`, "n");
    cell(tr, count(g.pending), g.pending > 0 ? "n bad" : "n").dataset.field = "pending";
  });
}

function show(overview) {
  const sum = (items, key) => items.reduce((total, item) => total + item[key], 0);
  $("pending-total").textContent = count(overview.pending);
  $("oldest-age").textContent = age(overview.oldest_age_seconds);
  const full = overview.minutes.length > 1 ? overview.minutes[overview.minutes.length - 2] : null;
  $("last-minute-committed").textContent = full ? count(full.committed) : "-";
  const capped = overview.consumers.some((c) => c.lag_capped) ? "+" : "";
  $("lag-total").textContent = count(sum(overview.consumers, "lag")) + capped;
  $("dead-letters-total").textContent = count(sum(overview.consumers, "dead_letters"));
  $("producers-live").textContent = count(sum(overview.producers, "live"));

  $("window").textContent = `last ${overview.minutes.length} min`;
  for (const key of [...STATES, "by_check"]) {
    $(`window-${key}`).textContent = count(sum(overview.minutes, key));
  }
  drawRates(overview.minutes);
  drawAges(overview.age_buckets);

  fill("oldest", overview.oldest, "oldest-empty", (tr, m) => {
    tr.dataset.transactionId = m.transaction_id;
    cell(tr, m.transaction_id, "id");
    cell(tr, m.producer_group, "name");
    cell(tr, m.topic, "name");
    cell(tr, age(m.age_seconds), "n age");
    cell(tr, count(m.check_count), "n checks");
    const last = m.check_status ? m.check_status.replace("_", " ") : "not yet";
    cell(tr, m.check_detail ? `${last}: ${m.check_detail}` : last, m.check_status || "");
  });
  fill("check-backs", overview.check_backs, "check-backs-empty", (tr, g) => {
    tr.dataset.group = g.producer_group;
    cell(tr, g.producer_group, "name");
    for (const key of ["pending", "due", "checked_recently", "delivered", "open", "failed",
      "no_producer", "live_producers"]) {
      const td = cell(tr, count(g[key]), "n");
      td.dataset.field = key;
      if ((key === "failed" || key === "no_producer") && g[key] > 0) td.classList.add("bad");
    }
    cell(tr, g.last_failure || "");
  });
  fill("producers", overview.producers, "producers-empty", (tr, p) => {
    tr.dataset.group = p.producer_group;
    cell(tr, p.producer_group, "name");
    cell(tr, count(p.live), p.live > 0 ? "n" : "n bad").dataset.field = "live";
    cell(tr, count(p.registered), "n").dataset.field = "registered";
    // groups settled by their own database: the mode and how its last check went
    let source = "";
    if (p.check_source_mode) {
      source = `database (${p.check_source_mode}): ` + (p.check_source_checked_at === null
        ? "not checked yet"
        : (p.check_source_ok ? "ok" : `failed: ${p.check_source_error || ""}`));
    }
    const settled = cell(tr, source);
    settled.dataset.field = "check_source";
    if (p.check_source_ok === false) settled.classList.add("bad");
  });
  const now = new Date(overview.at);
  fill("consumers", overview.consumers, "consumers-empty", (tr, c) => {
    tr.dataset.consumer = `${c.consumer_group}/${c.topic}`;
    cell(tr, c.consumer_group, "name");
    cell(tr, c.topic, "name");
    cell(tr, count(c.lag) + (c.lag_capped ? "+" : ""), "n").dataset.field = "lag";
    cell(tr, count(c.in_flight), "n").dataset.field = "in_flight";
    const dead = cell(tr, count(c.dead_letters) + (c.dead_letters_capped ? "+" : ""), "n");
    dead.dataset.field = "dead_letters";
    if (c.dead_letters > 0) dead.classList.add("bad");
    const oldest = c.oldest_pending_at ? (now - new Date(c.oldest_pending_at)) / 1000 : null;
    cell(tr, age(oldest), "n");
  });
  showStorage(overview.storage, overview.at);
  $("figures").hidden = false;
  $("state").textContent = `as of ${new Date(overview.at).toLocaleTimeString()}, ` +
    `refreshed every ${REFRESH_MS / 1000} s`;
  $("state").className = "state ok";
  document.body.dataset.at = overview.at;
}

function askForToken(reason) {
  $("token-reason").textContent = reason;
  $("token-form").hidden = false;
  $("token").focus();
}

async function refresh() {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  try {
    const answer = await fetch(`/v1/overview?minutes=${MINUTES}`, { headers, cache: "no-store" });
    if (answer.ok) {
      $("token-form").hidden = true;
      show(await answer.json());
    } else {
      const body = await answer.json().catch(() => ({}));
      const sentence = body.message || `HTTP ${answer.status}`;
      if (answer.status === 401 || answer.status === 403) {
        askForToken(`${sentence}. A token with the metrics or admin permission shows this page.`);
        $("state").textContent = "waiting for a token";
        $("state").className = "state bad";
        return; // no refresh until a token is given
      }
      $("state").textContent = `could not refresh: ${sentence}`;
      $("state").className = "state bad";
    }
  } catch (error) {
    $("state").textContent = `could not reach the coordinator (${error.message}); retrying`;
    $("state").className = "state bad";
  }
  $("forget-token").hidden = !token();
  setTimeout(refresh, REFRESH_MS);
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  refresh();
});

$("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});

refresh();
