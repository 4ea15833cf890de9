// The crashsafe console: renders the snapshots /api/events sends. Every value from the
// database is put in the page as text (textContent), never as markup: a record or an
// error holding "<script>" shows those characters and runs nothing.
"use strict";

const csrf = document.querySelector('meta[name="crashsafe-csrf"]').content;
const readOnly = document.querySelector('meta[name="crashsafe-read-only"]').content === "true";
const hasDatabase = document.querySelector('meta[name="crashsafe-database"]').content === "true";
const cards = new Map(); // crawl name -> {card, data: the JSON it was drawn from, steer}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) =>
      c instanceof Node ? el("td", {}, c) :
        el("td", typeof c === "number" ? { class: "n" } : {}, typeof c === "number" ? c.toLocaleString("en") : c))))));
}

async function act(crawl, action, body) {
  const response = await fetch(`/api/${action}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Crashsafe-CSRF": csrf },
    body: JSON.stringify({ ...(body || {}), crawl }),
  });
  const text = await response.text();
  if (!response.ok) { alert(`${action} failed: ${text}`); return; }
  const done = JSON.parse(text);
  const what = done.origin ? `origin ${done.origin} of ${crawl}` : crawl;
  if ("changed" in done) note(done.changed ? `${action}d ${what}` : `${what}: nothing to ${action}`);
  else if ("workers" in done) note(`asked ${done.workers} worker(s) of ${crawl} to stop`);
  else if ("requeued" in done) note(`re-queued ${done.requeued} URL(s) of ${crawl}`);
}

function note(text) {
  document.getElementById("mode").textContent = text;
}

function chart(rate) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", "0 0 600 80");
  svg.setAttribute("preserveAspectRatio", "none");
  if (rate.length > 1) {
    const top = Math.max(1, ...rate.map((p) => p.per_second));
    const points = rate.map((p, i) =>
      `${(i / (rate.length - 1)) * 600},${78 - (p.per_second / top) * 74}`).join(" ");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points);
    svg.append(line);
  }
  const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
  const last = rate.length ? rate[rate.length - 1].per_second : 0;
  const peak = rate.length ? Math.max(...rate.map((p) => p.per_second)) : 0;
  title.textContent = `pages per second, last hour (now ${last})`;
  svg.append(title);
  const said = rate.length ?
    `pages per second since ${rate[0].at}: now ${last}, at most ${peak}` :
    "pages per second: a first point comes within 5 s";
  return el("figure", { class: "rate" }, svg, el("figcaption", { class: "muted" }, said));
}

function steerRow(name) {
  // Made once per crawl and kept: what is typed in it survives the live updates.
  const origin = el("input", { type: "text", placeholder: "https://host:port", "aria-label": "origin" });
  return el("div", { class: "row steer" },
    el("button", { onclick: () => act(name, "pause") }, "Pause"),
    el("button", { onclick: () => act(name, "resume") }, "Resume"),
    el("button", { class: "danger", onclick: () => { if (confirm(`Cancel every worker of ${name}?`)) act(name, "cancel"); } }, "Cancel"),
    el("span", { class: "muted" }, "origin:"), origin,
    el("button", { onclick: () => act(name, "pause", { origin: origin.value }) }, "Pause origin"),
    el("button", { onclick: () => act(name, "resume", { origin: origin.value }) }, "Resume origin"));
}

function drawCrawl(c) {
  const u = c.urls, r = c.records, q = c.requests;
  const parts = [
    el("h2", {}, c.name, " ", el("span", { class: `badge state-${c.state}`, "data-state": c.state }, c.state),
      " ", el("span", { class: "muted why" }, c.why)),
    el("div", { class: "counts" },
      ...[["pending", u.pending], ["leased", u.leased], ["done", u.done], ["failed", u.failed],
          ["skipped", u.skipped], ["records", r.live], ["gone", r.gone], ["versions", r.versions],
          ["requests", q.total], ["retries", q.retries], ["repeated", q.repeated]]
        .map(([label, n]) => el("div", { "data-count": label }, el("b", {}, n.toLocaleString("en")), label))),
    chart(c.rate || []),
  ];
  if (c.paused) parts.push(el("p", {}, `Paused by ${c.paused.by} since ${c.paused.since}.`));
  if (c.paused_origins.length) {
    parts.push(el("h3", {}, "Paused origins"), table(["origin", "by", "since", ""], c.paused_origins.map((o) =>
      [o.origin, o.by, o.since, readOnly ? "" : el("button", { onclick: () => act(c.name, "resume", { origin: o.origin }) }, "Resume")])));
  }
  if (c.workers.length) {
    parts.push(el("h3", {}, "Workers"), table(["host", "pid", "alive", "leases", "pages", "started", "last seen"],
      c.workers.map((w) => [w.host, String(w.pid), w.alive ? "alive" : "dead", w.leases, w.pages, w.started_at, w.last_seen])));
  }
  if (c.waiting.length) {
    parts.push(el("h3", {}, "Waiting for"), table(["origin", "pages", "why"],
      c.waiting.map((w) => [w.origin, w.pages, w.why])));
  }
  if (c.failed_groups.length) {
    parts.push(el("h3", {}, "Dead letter ", readOnly ? "" : el("button", { onclick: () => act(c.name, "retry") }, "Retry all")),
      table(["count", "error", "example", ""], c.failed_groups.map((g) => [
        g.count, el("div", {}, g.error, el("pre", { class: "muted" }, g.example_error)),
        el("div", {}, g.example, readOnly ? "" : el("button", { class: "retry-one", onclick: () => act(c.name, "retry", { urls: [g.example] }) }, "Retry this one")),
        readOnly ? "" : el("button", { class: "retry-group", onclick: () => act(c.name, "retry", { error: g.key }) }, "Retry group")])));
  }
  if (c.endpoints.length) {
    const states = ["pending", "leased", "delivered", "failed"];
    parts.push(el("h3", {}, "Webhook deliveries"), table(["endpoint", ...states],
      c.endpoints.map((e) => [e.url, ...states.map((st) => e.deliveries[st] || 0)])));
  }
  return parts;
}

function render(snap) {
  document.getElementById("updated").textContent = `updated ${snap.at}`;
  const box = document.getElementById("crawls");
  if (!hasDatabase) box.replaceChildren();
  else if (!snap.crawls.length) box.replaceChildren(el("p", { class: "muted" }, "No crawl in this database yet."));
  else if (!cards.size) box.replaceChildren();
  for (const c of snap.crawls) {
    let entry = cards.get(c.name);
    if (!entry) {
      const body = el("div", { class: "body" });
      entry = { card: el("article", { class: "crawl", "data-crawl": c.name }, body), body, data: "" };
      if (!readOnly) entry.card.append(steerRow(c.name));
      cards.set(c.name, entry);
      box.append(entry.card);
    }
    const json = JSON.stringify(c);
    if (json !== entry.data) {
      entry.body.replaceChildren(...drawCrawl(c));
      entry.data = json;
    }
  }
  drawBatches(snap.batches || []);
  const select = document.getElementById("record-crawl");
  const names = snap.crawls.map((c) => c.name);
  if ([...select.options].map((o) => o.value).join("\n") !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  }
  document.getElementById("audit").replaceChildren(snap.audit.length ?
    table(["at", "crawl", "action", "target", "by", ""], snap.audit.map((a) =>
      [a.at, a.crawl, a.action, a.target || "", a.actor, a.detail || ""])) :
    el("p", { class: "muted" }, "No action recorded."));
}

function drawBatches(batches) {
  const box = document.getElementById("batches");
  box.hidden = !batches.length;
  const json = JSON.stringify(batches);
  if (box.dataset.drawn === json) return;
  box.dataset.drawn = json;
  box.replaceChildren(el("h2", {}, "Batch jobs"), ...batches.map((b) => {
    if (b.error) return el("div", { class: "batch" }, el("h3", {}, b.checkpoint), el("p", { class: "error" }, b.error));
    const usage = b.usage || {};
    const job = b.job || {};
    return el("div", { class: "batch", "data-checkpoint": b.checkpoint },
      el("h3", {}, b.checkpoint, " ", el("span", { class: "muted" }, [job.task, job.model].filter(Boolean).join(", "))),
      el("div", { class: "counts" },
        ...[["answered", b.items], ["of", b.total === null ? "?" : b.total], ["batches", b.batches], ["failed", b.failed_not_done],
            ["tokens in", usage.prompt_tokens || 0], ["tokens out", usage.completion_tokens || 0],
            ["items/s", b.items_per_second]]
          .map(([label, n]) => el("div", { "data-count": label }, el("b", {}, typeof n === "number" ? n.toLocaleString("en") : n), label)),
        el("div", { "data-count": "spend" }, el("b", {}, b.cost === null ? "?" : `$${b.cost.toFixed(4)}`), "spend")),
      b.corrupt_lines ? el("p", { class: "error" }, `${b.corrupt_lines} damaged line(s): not a checkpoint, or written by hand?`) : "",
      Object.keys(b.labels || {}).length ? table(["label", "items"], Object.entries(b.labels)) : "",
      el("p", { class: "muted" }, `last written ${b.updated}`, b.eta ? `; at this rate, done by ${b.eta}` : ""));
  }));
}

async function searchRecords(event) {
  event.preventDefault();
  const crawl = document.getElementById("record-crawl").value;
  const q = document.getElementById("record-q").value;
  const response = await fetch(`/api/records?crawl=${encodeURIComponent(crawl)}&q=${encodeURIComponent(q)}`);
  const out = document.getElementById("records");
  if (!response.ok) { out.replaceChildren(el("p", { class: "error" }, await response.text())); return; }
  const { records } = await response.json();
  out.replaceChildren(records.length ? table(["key", "version", "data", "url", "changed", ""], records.map((r) =>
    [r.key, r.version, el("pre", { class: "record-data" }, JSON.stringify(r.data, null, 1)), r.url || "",
     r.gone_at ? `gone ${r.gone_at}` : r.last_changed,
     el("button", { class: "versions", onclick: () => showVersions(crawl, r.id, r.key) }, "Versions")])) :
    el("p", { class: "muted" }, "No record matches."));
}

async function showChanges() {
  const crawl = document.getElementById("record-crawl").value;
  const response = await fetch(`/api/changes?crawl=${encodeURIComponent(crawl)}`);
  const out = document.getElementById("records");
  if (!response.ok) { out.replaceChildren(el("p", { class: "error" }, await response.text())); return; }
  const feed = await response.json();
  const what = (r) => r.gone_at ? "gone" : r.new ? "new" : feed.since ? "changed" : "";
  out.replaceChildren(
    el("h3", {}, feed.since ? `Changed since the last pass began (${feed.since})` : "Every record (the crawl has had one pass)"),
    feed.records.length ? table(["key", "change", "version", "data", "when"], feed.records.map((r) =>
      [r.key, what(r), r.version, el("pre", { class: "record-data" }, JSON.stringify(r.data, null, 1)), r.gone_at || r.last_changed])) :
      el("p", { class: "muted" }, "Nothing changed."));
}

function changes(before, after) {
  // Field by field: what a version changed in a record's data (top-level fields).
  const lines = [];
  const a = before && typeof before === "object" ? before : {};
  const b = after && typeof after === "object" ? after : {};
  for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
    const was = JSON.stringify(a[key]), now = JSON.stringify(b[key]);
    if (!(key in a)) lines.push(el("div", { class: "added" }, `+ ${key}: ${now}`));
    else if (!(key in b)) lines.push(el("div", { class: "removed" }, `- ${key}: ${was}`));
    else if (was !== now) lines.push(el("div", { class: "changed" }, `~ ${key}: ${was} → ${now}`));
  }
  return lines.length ? el("div", { class: "diff" }, ...lines) : el("span", { class: "muted" }, "no field changed");
}

async function showVersions(crawl, id, key) {
  const response = await fetch(`/api/records/versions?crawl=${encodeURIComponent(crawl)}&id=${encodeURIComponent(id)}`);
  const out = document.getElementById("versions");
  if (!response.ok) { out.replaceChildren(el("p", { class: "error" }, await response.text())); return; }
  const { versions } = await response.json();
  out.replaceChildren(el("h3", {}, `Versions of ${key}`), versions.length ?
    table(["version", "event", "at", "changes"], versions.map((v, i) =>
      [v.version, v.type, v.at, i === 0 ? el("pre", {}, JSON.stringify(v.data, null, 1)) : changes(versions[i - 1].data, v.data)])) :
    el("p", { class: "muted" }, "No version kept (the outbox holds them)."));
}

function connect() {
  const live = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.onopen = () => { live.textContent = "live"; };
  source.onmessage = (event) => render(JSON.parse(event.data));
  source.onerror = () => { live.textContent = "reconnecting"; };
}

if (!hasDatabase) {  // batch jobs only: no crawl, no record, no audit
  for (const id of ["crawls", "records-panel", "audit-panel"]) document.getElementById(id).hidden = true;
}
document.getElementById("record-search").addEventListener("submit", searchRecords);
document.getElementById("record-changes").addEventListener("click", showChanges);
if (readOnly) note("read-only");
connect();
