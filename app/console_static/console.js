// topicstore console: one ES module, no build step, no dependency. A client of the
// service's own API (same origin): every action is an API call with the bearer token kept
// in sessionStorage. Values from the API are written with textContent, never as markup.

const TOKEN_KEY = "topicstore.token";
const $ = (selector, root = document) => root.querySelector(selector);

// -- API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter; // seconds, from a 429's (or 503's) Retry-After
  }
}

const session = { token: null, role: null, tenant: null };

/** The bearer header, for the operations endpoints read with plain fetch: /readyz and
 * /metrics answer anyone, and add the per-tenant figures for the operator's token only. */
function tokenHeaders() {
  return session.token ? { Authorization: `Bearer ${session.token}` } : {};
}

/** Call the API; resolves to the parsed body, or throws ApiError with the envelope's
 * code and message (or the transport's failure as code "network"). */
async function api(method, path, { body, query, auth = true } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (Array.isArray(v)) for (const one of v) url.searchParams.append(k, one); // repeatable
    else if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = {};
  if (auth && session.token) headers.Authorization = `Bearer ${session.token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, "network", `the service did not answer (${e.message})`);
  }
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok && response.status !== 207) {
    const error = data && data.error;
    const wait = Number.parseInt(response.headers.get("retry-after") || "", 10);
    if (error) throw new ApiError(response.status, error.code, error.message, Number.isNaN(wait) ? null : wait);
    throw new ApiError(response.status, `http_${response.status}`, String(data).slice(0, 200));
  }
  return { status: response.status, data };
}

/** The tenant field every admin and match call sends: the operator's choice, or nothing
 * (a tenant token acts on its own tenant). */
function tenantParam() {
  if (session.role !== "operator") return undefined;
  return $("#tenant").value.trim() || undefined;
}

/** Show an API error in ``el``: "403 wrong_tenant: message" (and a 429's Retry-After). */
function showError(el, error) {
  if (!error) { el.hidden = true; el.textContent = ""; return; }
  el.replaceChildren();
  if (error instanceof ApiError) {
    el.append(`${error.status || ""} `, h("code", {}, error.code), `: ${error.message}`);
    if (error.retryAfter !== null) el.append(" · Retry-After: ", h("b", { "data-retry-after": String(error.retryAfter) }, `${error.retryAfter} s`));
    if (error.status === 401 && session.token) logout(error);
  } else {
    el.append(String(error));
  }
  el.hidden = false;
}

// -- DOM helpers ----------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const child of children) if (child !== null && child !== undefined) el.append(child);
  return el;
}

function fmt(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

const plural = (n, word) => `${fmt(n)} ${word}${n === 1 ? "" : "s"}`;

// Names hold no whitespace, control or format character now, but rows stored before that
// rule may: "\u202egnp.exe" would show as "exe.png", "w\u00a01" as "w 1". Such a character
// is shown as its escape, never as itself (the plain space stays a space).
const UNSEEN = /[^\S ]|\p{Cc}|\p{Cf}/gu;

function escapeOf(c) {
  const code = c.codePointAt(0).toString(16);
  return code.length > 4 ? `\\u{${code}}` : `\\u${code.padStart(4, "0")}`;
}

/** ``name`` as text with each such character escaped (summaries, titles, dialogs). */
function shown(name) {
  return String(name).replace(UNSEEN, escapeOf);
}

/** ``name`` as a node: each such character as a marked escape (table cells). */
function nameNode(name) {
  const text = String(name);
  const node = h("span", { class: "name" });
  let last = 0;
  for (const found of text.matchAll(UNSEEN)) {
    const code = found[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    node.append(text.slice(last, found.index), h("span", { class: "unseen", title: `U+${code} (not shown as itself)` }, escapeOf(found[0])));
    last = found.index + found[0].length;
  }
  node.append(text.slice(last));
  return node;
}

function fillRows(table, rows, columns, emptyText = "nothing") {
  const body = $("tbody", table);
  body.replaceChildren();
  if (!rows.length) body.append(h("tr", {}, h("td", { class: "empty", colspan: String(columns) }, emptyText)));
  for (const row of rows) body.append(row);
  table.hidden = false;
}

// -- header: node and readiness -------------------------------------------------------------

async function refreshHeader() {
  $("#node-name").textContent = location.host;
  const pill = $("#node-ready");
  try {
    const response = await fetch("/readyz");
    const ready = await response.json();
    pill.textContent = ready.ready ? "ready" : "not ready";
    pill.className = `pill ${ready.ready ? "ok" : "bad"}`;
    $("#node-seq").textContent = fmt(ready.seq);
    $("#node-lag").textContent = ready.lag === null ? "-" : fmt(ready.lag);
    $("#node-subs").textContent = fmt(ready.subscriptions);
  } catch (e) {
    pill.textContent = "unreachable";
    pill.className = "pill bad";
  }
}

// -- login ----------------------------------------------------------------------------------

/** The operator's tenant field suggests the tenants the routing table holds. */
async function offerTenants() {
  try {
    const response = await fetch("/metrics", { headers: tokenHeaders() });
    const tenants = parseMetrics(await response.text()).filter((s) => s.name === "topicstore_tenant_subscriptions").map((s) => s.labels.tenant);
    $("#tenants").replaceChildren(...[...new Set(tenants)].sort().map((t) => h("option", { value: t })));
  } catch (e) {
    // only a convenience: the field takes any name
  }
}

async function login(token) {
  session.token = token;
  const { data } = await api("GET", "/v1/whoami");
  session.role = data.role;
  session.tenant = data.tenant;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#who-role").textContent = data.role === "operator" ? "operator (any tenant)" : `tenant ${data.tenant}`;
  $("#tenant-field").hidden = data.role !== "operator";
  $("#node-subs-item").hidden = data.role !== "operator"; // every tenant's: not a tenant's figure
  if (data.role === "operator") offerTenants();
  $("#who").hidden = false;
  $("#login-view").hidden = true;
  $("#app-view").hidden = false;
  route();
}

function logout(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  Object.assign(session, { token: null, role: null, tenant: null });
  if (reason instanceof ApiError) showError($("#login-error"), reason);
  $("#who").hidden = true;
  $("#app-view").hidden = true;
  $("#login-view").hidden = false;
  stopHealth();
  analyticsRuns.shown = false; // the next login's first visit runs a query again
  $("#token").focus();
}

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = $("#login-error");
  try {
    await login($("#token").value.trim());
    $("#token").value = "";
    showError(error, null);
  } catch (e) {
    session.token = null;
    showError(error, e);
  }
});
$("#logout").addEventListener("click", () => { showError($("#login-error"), null); logout(); });

// -- tabs -----------------------------------------------------------------------------------

const PAGES = ["subscriptions", "match", "overlaps", "health", "analytics", "audit"];
const onShow = {};

function route() {
  if (!session.token) return;
  const name = PAGES.includes(location.hash.slice(1)) ? location.hash.slice(1) : "subscriptions";
  for (const page of PAGES) $(`#page-${page}`).hidden = page !== name;
  for (const a of document.querySelectorAll(".tabs a")) {
    if (a.dataset.tab === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${$(`#page-${name} h1`).textContent} · topicstore`;
  if (name !== "health") stopHealth();
  refreshHeader();
  if (onShow[name]) onShow[name]();
}
window.addEventListener("hashchange", route);
$("#tenant").addEventListener("change", () => route());

// -- Subscriptions --------------------------------------------------------------------------

const paging = { afters: [null], next: null };

function labelsOf(text) {
  text = text.trim();
  if (!text) return undefined;
  if (text.startsWith("{")) return JSON.parse(text);
  const labels = {};
  for (const part of text.split(",")) {
    const at = part.indexOf("=");
    if (at < 1) throw new Error(`label "${part.trim()}" is not key=value`);
    labels[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return labels;
}

//: Each load's number: an answer to an older load (another tenant, another filter) that
//: arrives after a newer one is dropped instead of overwriting it.
const loads = { counts: 0, page: 0 };

async function loadCounts() {
  const box = $("#counts");
  const serial = ++loads.counts;
  try {
    const { data } = await api("GET", "/v1/subscriptions-count", { query: { tenant: tenantParam() } });
    if (serial !== loads.counts) return;
    box.replaceChildren(h("span", {}, `tenant ${data.tenant} · total`, h("b", {}, fmt(data.total))));
    for (const [dialect, n] of Object.entries(data.by_dialect)) box.append(h("span", {}, dialect, h("b", {}, fmt(n))));
  } catch (e) {
    if (serial === loads.counts) box.replaceChildren();
  }
}

/** A subscription's group as "name" with its policy, or nothing when it has none. */
function groupCell(s) {
  if (!s.group) return "";
  return h("span", { class: "grp", "data-group": s.group, title: `shared: one member of ${shown(s.group)} receives each match (${s.group_policy})` },
    nameNode(s.group), h("span", { class: "policy" }, ` · ${s.group_policy}`));
}

function subscriptionRow(s) {
  const what = s.kind === "headers"
    ? `${s.mode}: ${Object.entries(s.criteria || {}).map(([k, v]) => (v === null ? k : `${k}=${v}`)).join(", ")}`
    : s.pattern;
  const labels = h("td", { class: "col-opt" });
  for (const [k, v] of Object.entries(s.labels || {})) labels.append(h("span", { class: "tag" }, `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`));
  const del = h("button", {
    type: "button", class: "danger", "aria-label": `Delete subscription ${s.id}`,
    onclick: () => deleteSubscription(s),
  }, "Delete");
  return h("tr", { "data-id": String(s.id) },
    h("td", { class: "num" }, String(s.id)),
    h("td", {}, h("button", { type: "button", class: "link", title: `Show only ${shown(s.subscriber)}'s subscriptions`, onclick: () => filterBySubscriber(s.subscriber) }, nameNode(s.subscriber))),
    h("td", {}, s.dialect),
    h("td", { class: "mono" }, what), h("td", {}, groupCell(s)), labels,
    h("td", { class: "col-opt", title: s.created_at }, s.created_at.replace("T", " ").slice(0, 19)),
    expiresCell(s.expires_at), h("td", {}, del));
}

/** When a subscription stops matching: "never", its instant (UTC), or, once past, the
 *  instant marked expired (it no longer matches; the sweep deletes it). */
function expiresCell(at) {
  if (!at) return h("td", { class: "muted" }, "never");
  const text = at.replace("T", " ").slice(0, 19);
  if (Date.parse(at) <= Date.now()) return h("td", { class: "expired", title: `${at}: expired, awaiting the sweep` }, `${text} (expired)`);
  return h("td", { title: at }, text);
}

function filterBySubscriber(subscriber) {
  const form = $("#search-form");
  form.reset();
  form.elements.subscriber.value = subscriber;
  form.dispatchEvent(new Event("input"));
  reloadSubscriptions();
}

async function loadPage() {
  const form = $("#search-form");
  const query = Object.fromEntries(new FormData(form));
  query.tenant = tenantParam();
  query.after = paging.afters[paging.afters.length - 1];
  const error = $("#subs-error");
  const serial = ++loads.page;
  try {
    const { data } = await api("GET", "/v1/subscriptions", { query });
    if (serial !== loads.page) return;
    showError(error, null);
    paging.next = data.next_after;
    fillRows($("#subs-table"), data.items.map(subscriptionRow), 9, "no subscriptions match");
    const page = paging.afters.length;
    const first = data.items.length ? data.items[0].id : null;
    const last = data.items.length ? data.items[data.items.length - 1].id : null;
    $("#page-info").textContent = data.items.length ? `page ${page} · ids ${first}–${last} · ${plural(data.items.length, "row")}` : `page ${page} · empty`;
  } catch (e) {
    if (serial !== loads.page) return;
    showError(error, e);
    fillRows($("#subs-table"), [], 8, "-");
    paging.next = null;
  }
  $("#page-next").disabled = paging.next === null;
  $("#page-prev").disabled = paging.afters.length < 2;
  $("#page-first").disabled = paging.afters.length < 2;
}

function reloadSubscriptions() {
  paging.afters = [null];
  refreshHeader();
  loadCounts();
  return loadPage();
}

async function deleteSubscription(s) {
  if (!confirm(`Delete subscription ${s.id} (${shown(s.subscriber)} → ${s.pattern})?`)) return;
  try {
    await api("DELETE", `/v1/subscriptions/${s.id}`);
    $("#create-result").className = "result ok";
    $("#create-result").textContent = `deleted #${s.id}`;
    showError($("#subs-error"), null);
  } catch (e) {
    showError($("#subs-error"), e);
  }
  refreshHeader();
  loadCounts();
  loadPage();
}

$("#search-form").addEventListener("submit", (event) => { event.preventDefault(); reloadSubscriptions(); });
$("#search-form").addEventListener("input", () => {
  const subscriber = $("#search-form").elements.subscriber.value;
  $("#delete-subscriber").disabled = !subscriber;
  $("#delete-subscriber").textContent = subscriber ? `Delete every subscription of ${shown(subscriber)}` : "Delete every subscription of…";
});
$("#delete-subscriber").addEventListener("click", async () => {
  const subscriber = $("#search-form").elements.subscriber.value;
  if (!subscriber || !confirm(`Delete EVERY subscription of ${shown(subscriber)}?`)) return;
  try {
    const { data } = await api("DELETE", `/v1/subscribers/${encodeURIComponent(subscriber)}/subscriptions`, { query: { tenant: tenantParam() } });
    $("#create-result").className = "result ok";
    $("#create-result").textContent = `deleted ${plural(data.deleted.length, "subscription")} of ${shown(subscriber)}`;
    showError($("#subs-error"), null);
  } catch (e) {
    showError($("#subs-error"), e);
  }
  reloadSubscriptions();
});
$("#search-form").addEventListener("reset", () => setTimeout(reloadSubscriptions));
$("#page-next").addEventListener("click", () => { paging.afters.push(paging.next); loadPage(); });
$("#page-prev").addEventListener("click", () => { paging.afters.pop(); loadPage(); });
$("#page-first").addEventListener("click", () => { paging.afters = [null]; loadPage(); });

$("#create-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const out = $("#create-result");
  const values = Object.fromEntries(new FormData(form));
  try {
    const body = { subscriber: values.subscriber, pattern: values.pattern, dialect: values.dialect, tenant: tenantParam() };
    if (values.group.trim()) body.group = values.group.trim();
    if (values.group_policy) body.group_policy = values.group_policy;
    try {
      body.labels = labelsOf(values.labels);
    } catch (e) {
      throw new ApiError(0, "invalid_labels", e.message);
    }
    const { status, data } = await api("POST", "/v1/subscriptions", { body });
    out.className = "result ok";
    const group = data.group ? ` (group ${shown(data.group)}, ${data.group_policy})` : "";
    out.textContent = status === 201 ? `created #${data.id}: ${shown(data.subscriber)} → ${data.pattern}${group}` : `already existed: #${data.id}`;
    form.elements.pattern.value = "";
    reloadSubscriptions();
  } catch (e) {
    out.className = "result bad";
    out.replaceChildren();
    showError(out, e);
  }
});

// Import: the file is read here with the rules of app/imports.py (a record's number is the
// physical line it starts on; CSV quotes may span lines; JSON lines end at "\n" only) and
// sent to POST /v1/subscriptions/bulk, whose per-item results are mapped back to lines.
const CSV_FIELDS = ["subscriber", "pattern", "dialect", "tenant", "group", "group_policy", "expires_at"];
const BULK_CHUNK = 1000;

function readJsonLines(text) {
  const items = [];
  const problems = [];
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    let item;
    try {
      item = JSON.parse(line);
    } catch (e) {
      problems.push({ line: i + 1, code: "invalid_json", message: e.message });
      return;
    }
    if (item === null || typeof item !== "object" || Array.isArray(item)) {
      problems.push({ line: i + 1, code: "not_an_object", message: "each line must be a JSON object" });
      return;
    }
    items.push({ line: i + 1, item });
  });
  return { items, problems };
}

/** CSV records with the physical line each starts on, by the rules of Python's csv module
 * in strict mode (what the command line's import uses): a quote opens a quoted field only
 * at the start of a field, is literal elsewhere, and after a closing quote only a comma or
 * a line end may follow; a line ends at "\n", "\r\n" or a lone "\r". On an error the
 * records read so far are kept and the rest of the file is the one problem, as there. */
function csvRecords(text) {
  const records = [];
  let line = 1, start = 1, field = "", row = [], i = 0;
  let quoted = false, closed = false, anyQuoted = false;
  const fail = (message) => ({ records, error: { line: start, code: "invalid_csv", message } });
  const endRecord = () => {
    row.push(field);
    records.push({ line: start, row, blank: row.length === 1 && row[0] === "" && !anyQuoted });
    row = []; field = ""; closed = false; anyQuoted = false;
  };
  while (i < text.length) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i += 2; continue; }
      if (c === '"') { quoted = false; closed = true; i += 1; continue; }
      if (c === "\n" || (c === "\r" && text[i + 1] !== "\n")) line += 1;
      field += c; i += 1; continue;
    }
    const lineEnd = c === "\n" || c === "\r";
    if (closed && c !== "," && !lineEnd) return fail(`',' expected after '"'`);
    if (c === '"' && field === "" && !closed) { quoted = true; anyQuoted = true; i += 1; continue; }
    if (c === ",") { row.push(field); field = ""; closed = false; i += 1; continue; }
    if (lineEnd) {
      endRecord();
      i += c === "\r" && text[i + 1] === "\n" ? 2 : 1;
      line += 1; start = line; continue;
    }
    field += c; i += 1;
  }
  if (quoted) return fail("unexpected end of data");
  if (field !== "" || row.length || closed) endRecord();
  return { records, error: null };
}

function readCsv(text) {
  const items = [];
  const problems = [];
  const { records, error } = csvRecords(text);
  for (const { line, row, blank } of records) {
    if (blank) continue;
    if (line === 1 && row.slice(0, 2).map((c) => c.trim().toLowerCase()).join(",") === "subscriber,pattern") continue;
    if (row.length < 2 || row.length > CSV_FIELDS.length) {
      problems.push({ line, code: "bad_columns", message: "expected subscriber,pattern[,dialect,tenant,group,group_policy,expires_at]" });
      continue;
    }
    const item = {};
    row.forEach((value, k) => { if (value !== "" || CSV_FIELDS[k] === "pattern") item[CSV_FIELDS[k]] = value; });
    items.push({ line, item });
  }
  if (error) problems.push(error);
  return { items, problems };
}

$("#import-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const file = event.target.elements.file.files[0];
  const summary = $("#import-summary");
  if (!file) return;
  let text = await file.text();
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const json = /\.(jsonl|ndjson|json)$/i.test(file.name);
  const { items, problems } = json ? readJsonLines(text) : readCsv(text);
  const tenant = tenantParam();
  const results = problems.map((p) => ({ line: p.line, status: "error", code: p.code, message: p.message }));
  summary.className = "result";
  summary.textContent = `importing ${items.length} records…`;
  try {
    for (let at = 0; at < items.length; at += BULK_CHUNK) {
      const chunk = items.slice(at, at + BULK_CHUNK);
      const body = { items: chunk.map(({ item }) => (tenant && item.tenant === undefined ? { ...item, tenant } : item)) };
      const { data } = await api("POST", "/v1/subscriptions/bulk", { body });
      for (const r of data.results) {
        results.push({ line: chunk[r.index].line, status: r.status, id: r.id, code: r.error && r.error.code, message: r.error && r.error.message });
      }
    }
  } catch (e) {
    summary.className = "result bad";
    summary.replaceChildren();
    showError(summary, e);
    return;
  }
  results.sort((a, b) => a.line - b.line);
  const count = (s) => results.filter((r) => r.status === s).length;
  summary.className = `result ${count("error") ? "bad" : "ok"}`;
  summary.textContent = `${file.name}: ${count("created")} created, ${count("exists")} already existed, ${count("error")} failed`;
  $("#import-all").checked = false;
  $("#import-table").classList.toggle("failures-only", count("error") > 0);
  $("#import-toggle").hidden = !count("error") || count("error") === results.length;
  $("#import-caption").textContent = count("error") ? "Failed lines" : "Per-line results";
  fillRows($("#import-table"), results.map((r) => h("tr", { class: r.status === "error" ? "bad" : "fine" },
    h("td", { class: "num" }, String(r.line)), h("td", {}, r.status), h("td", { class: "num" }, r.id === undefined || r.id === null ? "" : String(r.id)),
    h("td", {}, r.code ? h("code", {}, r.code) : ""), h("td", {}, r.message || ""))), 5, "the file holds no records");
  reloadSubscriptions();
});

$("#import-all").addEventListener("change", (event) => {
  $("#import-table").classList.toggle("failures-only", !event.target.checked);
  $("#import-caption").textContent = event.target.checked ? "Per-line results" : "Failed lines";
});

onShow.subscriptions = reloadSubscriptions;

// -- Match tester ---------------------------------------------------------------------------

const rowCache = new Map(); // id -> subscription row (an id is never reused for another row)
const DETAIL_LIMIT = 50;
let matchSerial = 0;
let matchTimer = null;

async function subscriptionById(id) {
  if (!rowCache.has(id)) {
    const { data } = await api("GET", `/v1/subscriptions/${id}`, { query: { tenant: tenantParam() } });
    rowCache.set(id, data);
  }
  return rowCache.get(id);
}

const SEPARATOR = { amqp: ".", mqtt: "/", nats: "." };

/** The captures of one explained match as "* = nasdaq · # = (nothing)", each wildcard
 * marked with its index among the pattern's words. */
function capturesCell(captures, dialect) {
  const cell = h("td", { class: "caps", "data-captures": JSON.stringify(captures) });
  if (!captures.length) cell.append(h("span", { class: "hint" }, "no wildcards: the literal topic"));
  for (const c of captures) {
    cell.append(h("span", { class: "cap", title: `word ${c.token + 1} of the pattern took topic words ${c.start + 1}–${c.start + c.words.length}` },
      h("b", {}, c.wildcard), h("sub", {}, String(c.token + 1)), " = ",
      c.words.length ? h("code", {}, c.words.join(SEPARATOR[dialect])) : h("i", {}, "nothing")));
  }
  return cell;
}

/** The topic's words with the failing one marked (or the end, when the topic was short). */
function failureCell(words, failure, dialect) {
  const cell = h("td", { class: "mono whole", "data-position": String(failure.position) });
  words.forEach((word, i) => {
    if (i) cell.append(SEPARATOR[dialect]);
    cell.append(i === failure.position ? h("mark", {}, word === "" ? "(empty)" : word) : word);
  });
  if (failure.position >= words.length) cell.append(h("mark", {}, "(end)"));
  return cell;
}

const REASONS = {
  mismatch: (f) => h("span", {}, "mismatch: expected ", ...(f.expected.length
    ? f.expected.flatMap((w, i) => [i ? " or " : "", h("code", {}, w)]) : ["another word"])),
  too_long: () => "topic too long: the pattern ended first",
  too_short: () => "topic too short: it ended first",
  system_topic: () => "$ topic: a leading wildcard does not take it",
};

function unmatchedRow(u, words, dialect) {
  if (!u.closest) {
    return h("tr", { "data-subscriber": u.subscriber }, h("td", {}, nameNode(u.subscriber)), h("td", { class: "num" }, "0"),
      h("td", { class: "empty", colspan: "4" }, `no subscription in ${dialect}`));
  }
  const f = u.closest.failure;
  return h("tr", { "data-subscriber": u.subscriber, "data-closest": String(u.closest.id), "data-reason": f.reason },
    h("td", {}, nameNode(u.subscriber)), h("td", { class: "num" }, fmt(u.patterns)), h("td", { class: "num" }, String(u.closest.id)),
    h("td", { class: "mono" }, u.closest.pattern), failureCell(words, f, dialect), h("td", {}, REASONS[f.reason](f)));
}

async function runMatch() {
  const form = $("#match-form");
  const topic = form.elements.topic.value;
  const dialect = form.elements.dialect.value;
  const key = form.elements.key.value;
  const named = form.elements.subscriber.value.split(",").map((s) => s.trim()).filter(Boolean);
  const serial = ++matchSerial;
  const error = $("#match-error");
  const summary = $("#match-summary");
  const tenant = tenantParam();
  try {
    const [{ data }, { data: why }] = await Promise.all([
      api("POST", "/v1/match", { body: { topic, dialect, tenant, key: key === "" ? undefined : key } }),
      // topic as a list: sent even when empty (the AMQP key "" is a topic; "" is dropped otherwise)
      api("GET", "/v1/match/explain", { query: { topic: [topic], dialect, tenant, subscriber: named } }),
    ]);
    const explained = new Map(why.matched.map((m) => [m.id, m]));
    const shownIds = data.subscriptions.slice(0, DETAIL_LIMIT);
    // Explain covers the lowest 1,000 matches; a delivered id past those is read by id.
    const rows = await Promise.all(shownIds.map((id) => (explained.has(id) ? explained.get(id) : subscriptionById(id).catch(() => null))));
    if (serial !== matchSerial) return; // a newer keystroke's answer wins
    showError(error, null);
    const more = data.subscriptions.length > DETAIL_LIMIT ? ` (details of the first ${DETAIL_LIMIT})` : "";
    const skipped = why.matched_total - data.subscriptions.length;
    const grouped = skipped > 0 ? `; ${plural(skipped, "other group member")} matched but not chosen` : "";
    summary.textContent = `"${topic}" (${dialect}) reaches ${plural(data.subscriptions.length, "subscription")} of ${plural(data.subscribers.length, "subscriber")}${grouped}${more}: ${data.subscribers.map(shown).join(", ") || "nobody"}`;
    summary.dataset.ids = data.subscriptions.join(",");
    const chosenBy = new Map(data.groups.map((g) => [g.subscription, g]));
    fillRows($("#match-table"), shownIds.map((id, k) => {
      const row = rows[k];
      const m = explained.get(id);
      const g = chosenBy.get(id);
      return h("tr", { "data-id": String(id) }, h("td", { class: "num" }, String(id)),
        h("td", {}, row ? nameNode(row.subscriber) : "?"), h("td", { class: "mono whole" }, row ? row.pattern : "?"),
        m ? capturesCell(m.captures, dialect) : h("td", { class: "hint" }, "not explained (past the first 1,000)"),
        h("td", {}, g ? h("span", { class: "grp" }, nameNode(g.group), h("span", { class: "policy" }, ` · chosen of ${g.candidates}`)) : ""));
    }), 5, "no subscription matches this topic");
    fillRows($("#groups-table"), data.groups.map((g) => h("tr", { "data-group": g.group, "data-id": String(g.subscription) },
      h("td", {}, nameNode(g.group)), h("td", {}, g.policy), h("td", { class: "num" }, String(g.subscription)),
      h("td", {}, nameNode(g.subscriber)), h("td", { class: "num" }, fmt(g.candidates)))), 5, "no group matched");
    $("#unmatched-table").hidden = !named.length;
    if (named.length) {
      fillRows($("#unmatched-table"), why.unmatched.map((u) => unmatchedRow(u, why.words, dialect)), 6,
        `every one named receives it (${named.join(", ")})`);
    }
  } catch (e) {
    if (serial !== matchSerial) return;
    summary.textContent = "";
    delete summary.dataset.ids;
    for (const id of ["#match-table", "#groups-table", "#unmatched-table"]) $(id).hidden = true;
    showError(error, e);
  }
}

$("#match-form").addEventListener("submit", (event) => { event.preventDefault(); clearTimeout(matchTimer); runMatch(); });
$("#match-form").addEventListener("input", () => { clearTimeout(matchTimer); matchTimer = setTimeout(runMatch, 150); });

$("#batch-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const topics = event.target.elements.topics.value.split("\n").map((t) => t.replace(/\r$/, "")).filter((t, i, all) => t !== "" || i < all.length - 1);
  const error = $("#batch-error");
  try {
    const dialect = $("#match-form").elements.dialect.value;
    const { data } = await api("POST", "/v1/match/batch", { body: { topics, dialect, tenant: tenantParam() } });
    showError(error, null);
    fillRows($("#batch-table"), data.results.map((r, k) => h("tr", { class: r.error ? "bad" : "" },
      h("td", { class: "mono" }, topics[k]), h("td", { class: "num" }, r.error ? "" : String(r.subscriptions.length)),
      h("td", {}, r.error ? "" : r.subscribers.map(shown).join(", ")),
      h("td", {}, r.error || !r.groups ? "" : r.groups.map((g) => `${shown(g.group)} → ${shown(g.subscriber)}`).join(", ")),
      h("td", {}, r.error ? h("span", {}, h("code", {}, r.error.code), ` ${r.error.message}`) : ""))), 5, "no topics");
  } catch (e) {
    showError(error, e);
  }
});

onShow.match = () => {
  $("#match-topic").focus();
  if ($("#match-topic").value) runMatch();
};

// -- Overlaps -------------------------------------------------------------------------------

const overlapPaging = { afters: [null], next: null, serial: 0, query: null };

async function loadOverlaps() {
  const q = overlapPaging.query;
  const error = $("#overlaps-error");
  const serial = ++overlapPaging.serial;
  const after = overlapPaging.afters[overlapPaging.afters.length - 1];
  try {
    const { data } = await api("GET", "/v1/subscriptions", {
      query: { [q.mode]: q.pattern, dialect: q.dialect, limit: q.limit, tenant: tenantParam(), after },
    });
    if (serial !== overlapPaging.serial) return;
    showError(error, null);
    overlapPaging.next = data.next_after;
    fillRows($("#overlaps-table"), data.items.map((s) => h("tr", { "data-id": String(s.id) },
      h("td", { class: "num" }, String(s.id)),
      h("td", {}, h("button", { type: "button", class: "link", title: `${shown(s.subscriber)}'s redundant patterns`, onclick: () => findRedundant(s.subscriber, s.dialect) }, nameNode(s.subscriber))),
      h("td", {}, s.dialect), h("td", { class: "mono" }, s.pattern), h("td", {}, groupCell(s)),
      h("td", { class: "col-opt", title: s.created_at }, s.created_at.replace("T", " ").slice(0, 19)))), 6,
    overlapPaging.afters.length > 1 || data.next_after !== null ? "none on this page" : "no subscription");
    const relation = q.mode === "overlaps" ? "overlapping" : "covered by";
    $("#overlaps-caption").textContent = `Subscriptions ${relation} ${q.pattern} (${q.dialect})`;
    const page = overlapPaging.afters.length;
    const first = data.items.length ? data.items[0].id : null;
    const last = data.items.length ? data.items[data.items.length - 1].id : null;
    $("#overlaps-info").textContent = `page ${page} · ${data.items.length ? `ids ${first}–${last} · ` : ""}${plural(data.items.length, "row")}${data.next_after === null ? "" : " · more follow"}`;
    $("#overlaps-pager").hidden = false;
  } catch (e) {
    if (serial !== overlapPaging.serial) return;
    showError(error, e);
    $("#overlaps-table").hidden = true;
    $("#overlaps-pager").hidden = true;
    overlapPaging.next = null;
  }
  $("#overlaps-next").disabled = overlapPaging.next === null;
  $("#overlaps-prev").disabled = overlapPaging.afters.length < 2;
  $("#overlaps-first").disabled = overlapPaging.afters.length < 2;
}

$("#overlaps-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const values = Object.fromEntries(new FormData(event.target));
  overlapPaging.query = { mode: values.mode, pattern: values.pattern, dialect: values.dialect, limit: values.limit };
  overlapPaging.afters = [null];
  loadOverlaps();
});
// Back on the page (or another tenant picked in the header): the searches shown run again.
onShow.overlaps = () => {
  if (overlapPaging.query) { overlapPaging.afters = [null]; loadOverlaps(); }
  if (!$("#redundant-table").hidden) $("#redundant-form").requestSubmit();
};
$("#overlaps-next").addEventListener("click", () => { overlapPaging.afters.push(overlapPaging.next); loadOverlaps(); });
$("#overlaps-prev").addEventListener("click", () => { overlapPaging.afters.pop(); loadOverlaps(); });
$("#overlaps-first").addEventListener("click", () => { overlapPaging.afters = [null]; loadOverlaps(); });

function findRedundant(subscriber, dialect) {
  const form = $("#redundant-form");
  form.elements.subscriber.value = subscriber;
  form.elements.dialect.value = dialect;
  form.requestSubmit();
}

$("#redundant-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const values = Object.fromEntries(new FormData(event.target));
  const error = $("#redundant-error");
  const summary = $("#redundant-summary");
  try {
    const { data } = await api("GET", `/v1/subscribers/${encodeURIComponent(values.subscriber)}/redundant`, {
      query: { dialect: values.dialect, tenant: tenantParam() },
    });
    showError(error, null);
    summary.textContent = `${shown(data.subscriber)} (tenant ${data.tenant}) holds ${plural(data.patterns, "pattern")} in ${data.dialect}; ${fmt(data.redundant.length)} redundant`;
    fillRows($("#redundant-table"), data.redundant.map((r) => h("tr", { "data-id": String(r.id), "data-covered-by": String(r.covered_by) },
      h("td", { class: "num" }, String(r.id)), h("td", { class: "mono" }, r.pattern),
      h("td", { class: "num" }, String(r.covered_by)), h("td", { class: "mono" }, r.covered_by_pattern))), 4, "none: every pattern adds topics");
  } catch (e) {
    summary.textContent = "";
    $("#redundant-table").hidden = true;
    showError(error, e);
  }
});

// -- Health ---------------------------------------------------------------------------------

/** Prometheus text format → [{name, labels, value}] (comments skipped). */
function parseMetrics(text) {
  const samples = [];
  const lineRe = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = lineRe.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(labelRe)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

const isMatchRoute = (route) => route === "/v1/match" || route.startsWith("/v1/match/");

/** Match requests, their latency buckets and sum, from one scrape. */
function matchFigures(samples) {
  let count = 0, sum = 0;
  const buckets = new Map();
  for (const s of samples) {
    if (!s.labels.route || !isMatchRoute(s.labels.route)) continue;
    if (s.name === "topicstore_http_request_seconds_count") count += s.value;
    else if (s.name === "topicstore_http_request_seconds_sum") sum += s.value;
    else if (s.name === "topicstore_http_request_seconds_bucket") {
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      buckets.set(le, (buckets.get(le) || 0) + s.value);
    }
  }
  return { count, sum, buckets };
}

/** The q-quantile's upper bucket bound over the difference of two scrapes' buckets. */
function quantile(q, now, before) {
  const bounds = [...now.keys()].sort((a, b) => a - b);
  const total = (now.get(Infinity) || 0) - ((before && before.get(Infinity)) || 0);
  if (total <= 0) return null;
  for (const le of bounds) {
    if ((now.get(le) - ((before && before.get(le)) || 0)) >= q * total) return le;
  }
  return Infinity;
}

//: Rates and percentiles compare with the oldest scrape of the last WINDOW_MS (so a
//: "Refresh now" right after a refresh still covers a useful span).
const WINDOW_MS = 60000;
const health = { timer: null, history: [] };

function tile(label, value, sub, state = "") {
  return h("div", { class: `tile ${state}`, "data-metric": label }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), h("div", { class: "sub" }, sub || ""));
}

async function refreshHealth() {
  const error = $("#health-error");
  refreshHeader();
  let ready, samples;
  try {
    const readyz = await fetch("/readyz", { headers: tokenHeaders() });
    ready = await readyz.json();
    const metrics = await fetch("/metrics", { headers: tokenHeaders() });
    if (!metrics.ok) throw new ApiError(metrics.status, `http_${metrics.status}`, "/metrics did not answer");
    samples = parseMetrics(await metrics.text());
    showError(error, null);
  } catch (e) {
    showError(error, e instanceof ApiError ? e : new ApiError(0, "network", String(e)));
    return;
  }
  const at = performance.now();
  const one = (name) => { const s = samples.find((x) => x.name === name); return s ? s.value : null; };
  const figures = matchFigures(samples);
  health.history = health.history.filter((h) => at - h.at <= WINDOW_MS);
  const previous = health.history[0];
  health.history.push({ at, figures });
  let rate = null, mean = null, p50 = null, p99 = null, window = "";
  if (previous) {
    const seconds = (at - previous.at) / 1000;
    const requests = figures.count - previous.figures.count;
    rate = seconds > 0 ? requests / seconds : null;
    mean = requests > 0 ? ((figures.sum - previous.figures.sum) / requests) * 1000 : null;
    p50 = quantile(0.5, figures.buckets, previous.figures.buckets);
    p99 = quantile(0.99, figures.buckets, previous.figures.buckets);
    window = `last ${fmt(seconds, 0)} s · ${fmt(requests)} requests`;
  }
  const ms = (v) => (v === null ? "-" : v === Infinity ? "> 5000" : fmt(v * 1000, v < 0.01 ? 1 : 0));
  const lag = one("topicstore_change_lag");
  const disagreements = one("topicstore_shadow_disagreements_total");
  $("#health-tiles").replaceChildren(
    tile("Readiness", ready.ready ? "ready" : "not ready", `seq ${fmt(ready.seq)}`, ready.ready ? "ok" : "bad"),
    tile("Change-log lag", lag === null ? "-" : fmt(lag), "committed, not yet applied", lag ? "warn" : "ok"),
    tile("Subscriptions", fmt(one("topicstore_subscriptions")), "in the routing table"),
    tile("Match rate", rate === null ? "…" : `${fmt(rate, 1)}/s`, window || "needs two refreshes"),
    tile("Match latency", mean === null ? "-" : `${fmt(mean, 2)} ms`,
      mean === null ? "no matches in the window" : `mean · p50 ≤ ${ms(p50)} ms · p99 ≤ ${ms(p99)} ms`),
    tile("Matches total", fmt(figures.count), `mean ${figures.count ? fmt((figures.sum / figures.count) * 1000, 2) : "-"} ms since start`),
    tile("Rebuild time", `${fmt(one("topicstore_rebuild_seconds"), 3)} s`, "last full build of the table"),
    tile("Shadow checks", fmt(one("topicstore_shadow_checks_total")), `${fmt(disagreements)} disagreements`, disagreements ? "bad" : ""),
  );
  const tenants = samples.filter((s) => s.name === "topicstore_tenant_subscriptions")
    .filter((s) => session.role === "operator" || s.labels.tenant === session.tenant)
    .sort((a, b) => a.labels.tenant.localeCompare(b.labels.tenant) || a.labels.dialect.localeCompare(b.labels.dialect));
  fillRows($("#tenants-table"), tenants.map((s) => h("tr", {}, h("td", {}, s.labels.tenant), h("td", {}, s.labels.dialect), h("td", { class: "num" }, fmt(s.value)))), 3, "no subscriptions");
  const routes = new Map();
  for (const s of samples) {
    if (!s.labels.route) continue;
    const r = routes.get(s.labels.route) || { requests: 0, errors: 0, sum: 0, count: 0 };
    if (s.name === "topicstore_http_requests_total") {
      r.requests += s.value;
      if (Number(s.labels.status) >= 400) r.errors += s.value;
    } else if (s.name === "topicstore_http_request_seconds_sum") r.sum += s.value;
    else if (s.name === "topicstore_http_request_seconds_count") r.count += s.value;
    routes.set(s.labels.route, r);
  }
  const ordered = [...routes.entries()].filter(([, r]) => r.requests).sort((a, b) => b[1].requests - a[1].requests);
  fillRows($("#routes-table"), ordered.map(([route, r]) => h("tr", {}, h("td", { class: "mono" }, route), h("td", { class: "num" }, fmt(r.requests)),
    h("td", { class: "num" }, fmt(r.errors)), h("td", { class: "num" }, r.count ? fmt((r.sum / r.count) * 1000, 2) : "-"))), 4, "no requests yet");
  $("#health-when").textContent = `updated ${new Date().toLocaleTimeString()}`;
  await refreshGraphs();
}

// The Health graphs: the service's own samples of its metrics (GET /v1/metrics/history),
// drawn as SVG lines over the span the service keeps (an hour at its default interval).
const GRAPHS = [
  { id: "rate", title: "Match rate (requests/s)", unit: "/s", digits: 1, series: [{ key: "rate", cls: "line", name: "rate" }] },
  {
    id: "latency", title: "Match latency (ms)", unit: " ms", digits: 2, series: [
      { key: "p50_ms", cls: "line", name: "p50" }, { key: "p99_ms", cls: "line2", name: "p99" },
      { key: "mean_ms", cls: "line3", name: "mean" }],
  },
  { id: "lag", title: "Change-log lag (changes not yet applied)", unit: "", digits: 0, series: [{ key: "lag", cls: "line", name: "lag" }] },
];

/** A span of milliseconds as people say it: "72 s", "60 min". */
function spanText(ms) {
  return ms < 120000 ? `${fmt(ms / 1000)} s` : `${fmt(ms / 60000)} min`;
}

/** The smallest of 1, 2, 2.5, 5 × 10^k at least ``v`` (an axis' top). */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((top) => top >= v * (1 - 1e-9));
}

function historyChart(spec, samples, span) {
  const width = 420, height = 150, left = 40, right = 8, top = 12, bottom = 20;
  const end = samples.length ? Date.parse(samples[samples.length - 1].at) : Date.now();
  const max = niceMax(Math.max(0, ...samples.flatMap((x) => spec.series.map((one) => x[one.key] ?? 0))));
  const px = (t) => left + (1 - (end - t) / span) * (width - left - right);
  const py = (v) => height - bottom - (v / max) * (height - bottom - top);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${spec.title} over the last ${spanText(span)}` });
  svg.append(
    s("line", { class: "grid-line", x1: left, y1: py(max / 2), x2: width - right, y2: py(max / 2) }),
    s("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }),
    s("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    s("text", { x: left - 4, y: top + 4, "text-anchor": "end" }, fmt(max, max < 10 && !Number.isInteger(max) ? 1 : 0)),
    s("text", { x: left - 4, y: py(max / 2) + 4, "text-anchor": "end" }, fmt(max / 2, max / 2 < 10 && !Number.isInteger(max / 2) ? 2 : 0)),
    s("text", { x: left - 4, y: height - bottom + 4, "text-anchor": "end" }, "0"),
    s("text", { x: left, y: height - 6 }, `−${spanText(span)}`),
    s("text", { x: width - right, y: height - 6, "text-anchor": "end" }, "now"),
  );
  spec.series.forEach((one, n) => {
    let d = "", last = null;
    for (const x of samples) {
      const v = x[one.key];
      if (v === null || v === undefined) { last = null; continue; }
      const at = Date.parse(x.at);
      d += `${last === null ? "M" : "L"}${px(at).toFixed(1)},${py(v).toFixed(1)} `;
      last = { at, v };
    }
    if (d) svg.append(s("path", { class: one.cls, d: d.trim(), "data-series": one.key }));
    if (last) {
      const dot = s("circle", { class: one.cls.replace("line", "dot"), cx: px(last.at), cy: py(last.v), r: 3 });
      dot.append(s("title", {}, `${one.name}: ${fmt(last.v, spec.digits)}${spec.unit}`));
      svg.append(dot);
    }
    if (spec.series.length > 1) {
      svg.append(s("text", { x: width - right - (spec.series.length - 1 - n) * 40, y: top - 2, "text-anchor": "end", class: `legend-${one.cls}` }, one.name));
    }
  });
  return svg;
}

async function refreshGraphs() {
  let history;
  try {
    ({ data: history } = await api("GET", "/v1/metrics/history"));
  } catch (e) {
    showError($("#health-error"), e);
    return;
  }
  const span = history.points * history.interval_seconds * 1000;
  const samples = history.samples.filter((x) => Date.parse(x.at) > Date.now() - span - 60000);
  for (const spec of GRAPHS) {
    const figure = $(`#graph-${spec.id}`);
    const points = samples.filter((x) => spec.series.some((one) => x[one.key] !== null && x[one.key] !== undefined)).length;
    const newest = samples.length ? samples[samples.length - 1] : null;
    const value = (one) => (newest[one.key] === null ? "-" : `${fmt(newest[one.key], spec.digits)}${spec.unit}`);
    const now = newest === null ? "no sample yet"
      : spec.series.length === 1 ? `latest ${value(spec.series[0])}` : `latest ${spec.series.map((one) => `${one.name} ${value(one)}`).join(" · ")}`;
    figure.dataset.points = String(points);
    figure.replaceChildren(h("figcaption", {}, `${spec.title} `, h("span", { class: "now" }, now)), historyChart(spec, samples, span));
  }
  $("#graphs-hint").textContent = `The last ${spanText(span)} of this replica, one sample every ${fmt(history.interval_seconds, history.interval_seconds < 1 ? 2 : 0)} s `
    + `(GET /v1/metrics/history: ${plural(history.samples.length, "sample")}, at most ${fmt(history.points)}). Latency has a gap where no match was answered, lag where the table was being built.`;
}

function stopHealth() {
  clearTimeout(health.timer);
  health.timer = null;
}

function scheduleHealth() {
  stopHealth();
  const every = Number($("#health-every").value);
  refreshHealth().finally(() => {
    if (every > 0 && !$("#page-health").hidden) health.timer = setTimeout(scheduleHealth, every * 1000);
  });
}

$("#health-every").addEventListener("change", scheduleHealth);
$("#health-now").addEventListener("click", scheduleHealth);
onShow.health = scheduleHealth;

// -- Analytics ------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

/** What each query's chart shows: bars of ``value`` per ``label``, or a timeline. */
const CHARTS = {
  subscribers: { kind: "bars", label: (r) => `${shown(r.subscriber)} (${r.tenant})`, value: "deliveries" },
  tenants: { kind: "bars", label: (r) => r.tenant, value: "deliveries" },
  fanout: { kind: "bars", label: (r) => `fan-out ${r.fanout}`, value: "messages" },
  "topic-fanout": { kind: "bars", label: (r) => r.topic, value: "deliveries" },
  "hot-topics": { kind: "bars", label: (r) => r.topic, value: "messages" },
  timeline: { kind: "line" },
};

function barChart(rows, spec) {
  const top = rows.slice(0, 25);
  const max = Math.max(1, ...top.map((r) => Number(r[spec.value]) || 0));
  const rowH = 20, labelW = 260, width = 900, barW = width - labelW - 70;
  const svg = s("svg", { viewBox: `0 0 ${width} ${top.length * rowH + 4}`, role: "img", "aria-label": `${spec.value} per row` });
  top.forEach((r, i) => {
    const v = Number(r[spec.value]) || 0;
    const y = i * rowH + 2;
    const label = String(spec.label(r));
    svg.append(s("text", { x: labelW - 6, y: y + 14, "text-anchor": "end" }, label.length > 40 ? `${label.slice(0, 39)}…` : label));
    const bar = s("rect", { class: "bar", x: labelW, y, width: Math.max(1, (v / max) * barW), height: rowH - 5 });
    bar.append(s("title", {}, `${label}: ${v}`));
    svg.append(bar, s("text", { x: labelW + (v / max) * barW + 4, y: y + 14 }, fmt(v)));
  });
  return svg;
}

function lineChart(rows) {
  const width = 900, height = 260, left = 50, bottom = 30, right = 20, top = 34;
  const xs = rows.map((r) => new Date(r.bucket).getTime());
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const max = Math.max(1, ...rows.map((r) => Number(r.messages) || 0));
  const px = (t) => left + (x1 === x0 ? 0.5 : (t - x0) / (x1 - x0)) * (width - left - right);
  const py = (v) => height - bottom - (v / max) * (height - bottom - top);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "messages and unmatched over time" });
  svg.append(s("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }),
    s("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    s("text", { x: left - 4, y: top + 4, "text-anchor": "end" }, fmt(max)), s("text", { x: left - 4, y: height - bottom, "text-anchor": "end" }, "0"));
  const path = (key) => rows.map((r, i) => `${i ? "L" : "M"}${px(xs[i]).toFixed(1)},${py(Number(r[key]) || 0).toFixed(1)}`).join(" ");
  svg.append(s("path", { class: "line", d: path("messages") }), s("path", { class: "line2", d: path("unmatched") }));
  rows.forEach((r, i) => {
    for (const [key, cls] of [["messages", "dot"], ["unmatched", "dot2"]]) {
      const dot = s("circle", { class: cls, cx: px(xs[i]), cy: py(Number(r[key]) || 0), r: 3.5 });
      dot.append(s("title", {}, `${String(r.bucket).replace("T", " ")}: ${r[key]} ${key}`));
      svg.append(dot);
    }
  });
  for (const i of [0, rows.length - 1]) {
    svg.append(s("text", { x: px(xs[i]), y: height - 10, "text-anchor": i ? "end" : "start" }, String(rows[i].bucket).replace("T", " ").slice(0, 16)));
  }
  svg.append(s("text", { x: width - right - 130, y: 14, class: "legend1", "text-anchor": "end" }, "━ messages"),
    s("text", { x: width - right, y: 14, class: "legend2", "text-anchor": "end" }, "╍ unmatched"));
  return svg;
}

function analyticsFields() {
  const form = $("#analytics-form");
  const query = form.elements.query.value;
  form.elements.bucket.disabled = query !== "timeline";
  form.elements.limit.disabled = query === "timeline" || query === "fanout";
}
$("#analytics-form").elements.query.addEventListener("change", analyticsFields);
analyticsFields();

//: Refusals that mean "no route output here yet": the page's empty state, saying what to
//: run (the API's message names the commands, in backquotes), not an error.
const NOTHING_YET = new Set(["no_deliveries", "needs_subscriptions", "analytics_not_configured"]);
const analyticsRuns = { serial: 0, shown: false };

/** ``text`` with its `backquoted` parts as code elements (as text, never as markup). */
function withCode(text) {
  return String(text).split("`").map((part, i) => (i % 2 ? h("code", {}, part) : part));
}

async function runAnalytics() {
  const form = $("#analytics-form");
  const values = Object.fromEntries(new FormData(form));
  const error = $("#analytics-error");
  const empty = $("#analytics-empty");
  const chart = $("#analytics-chart");
  const table = $("#analytics-table");
  const serial = ++analyticsRuns.serial;
  try {
    const query = values.query === "timeline" ? { bucket: values.bucket } : values.query === "fanout" ? {} : { limit: values.limit };
    const { data } = await api("GET", `/v1/analytics/${values.query}`, { query });
    if (serial !== analyticsRuns.serial) return;
    showError(error, null);
    empty.hidden = true;
    const spec = CHARTS[data.query];
    chart.hidden = !(spec && data.rows.length);
    if (!chart.hidden) {
      chart.replaceChildren(h("figcaption", {}, `${form.elements.query.selectedOptions[0].textContent}`),
        spec.kind === "line" ? lineChart(data.rows) : barChart(data.rows, spec));
    }
    $("caption", table).textContent = `${data.query}: ${plural(data.rows.length, "row")}`;
    const numeric = (c) => data.rows.length > 0 && typeof data.rows[0][c] === "number";
    $("thead", table).replaceChildren(h("tr", {}, ...data.columns.map((c) => h("th", { scope: "col", class: numeric(c) ? "num" : "" }, c))));
    fillRows(table, data.rows.map((r) => h("tr", {}, ...data.columns.map((c) => {
      const v = r[c];
      return h("td", { class: typeof v === "number" ? "num" : "" }, v === null ? "" : typeof v === "number" ? fmt(v, Number.isInteger(v) ? 0 : 4) : String(v));
    }))), data.columns.length || 1, "no rows");
  } catch (e) {
    if (serial !== analyticsRuns.serial) return;
    chart.hidden = true;
    table.hidden = true;
    const nothingYet = e instanceof ApiError && NOTHING_YET.has(e.code);
    empty.hidden = !nothingYet;
    empty.dataset.code = nothingYet ? e.code : "";
    if (nothingYet) $("#analytics-empty-text").replaceChildren(...withCode(e.message));
    showError(error, nothingYet ? null : e);
  }
}

$("#analytics-form").addEventListener("submit", (event) => { event.preventDefault(); runAnalytics(); });
// The first visit runs the selected query: the tab shows data, or says what to run.
onShow.analytics = () => {
  if (analyticsRuns.shown) return;
  analyticsRuns.shown = true;
  runAnalytics();
};

// -- Audit ----------------------------------------------------------------------------------

const auditPaging = { afters: [null], next: null, serial: 0, hold: null };

/** Sorted ids as runs: [4, 5, 6, 9] → "4–6, 9". */
function idRanges(ids) {
  const runs = [];
  for (const id of ids) {
    const last = runs[runs.length - 1];
    if (last && id === last[1] + 1) last[1] = id;
    else runs.push([id, id]);
  }
  return runs.map(([a, b]) => (a === b ? String(a) : `${a}–${b}`)).join(", ");
}

function auditRow(r) {
  const when = r.created_at.replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace(/(Z|[+-]00:?00)$/, "");
  const ids = idRanges(r.ids);
  const shown = ids.length > 60 ? `${ids.slice(0, ids.lastIndexOf(", ", 60))}, …` : ids;
  const operator = session.role === "operator";
  return h("tr", { "data-id": String(r.id), "data-action": r.action },
    h("td", { class: "num" }, String(r.id)),
    h("td", { class: "nowrap" }, h("button", { type: "button", class: "link plain", title: `${r.created_at}: show from here`, onclick: () => auditFrom(r.created_at) }, when)),
    h("td", {}, operator ? h("button", { type: "button", class: "link", title: `Show only tenant ${r.tenant}`, onclick: () => auditTenant(r.tenant) }, r.tenant) : r.tenant),
    h("td", {}, h("span", { class: `act act-${r.action}` }, r.action)),
    h("td", { class: "mono", "data-ids": r.ids.join(","), title: `${plural(r.ids.length, "subscription")}: ${ids}` },
      shown, r.ids.length > 1 ? h("span", { class: "count" }, ` (${fmt(r.ids.length)})`) : null),
    h("td", { "data-caller": r.caller_tenant ?? "" }, r.caller_tenant === null
      ? h("span", { class: "role role-op" }, "operator (any tenant)")
      : h("span", { class: "role" }, "tenant ", nameNode(r.caller_tenant))),
    h("td", { class: "mono token", title: tokenTitle(r.caller_name) }, r.caller_name),
    h("td", { class: "mono col-opt small" }, r.request_id),
    h("td", { class: "mono col-opt" }, r.address));
}

/** What a token's name says: the operator's, a tenant's (by its hash), or the command line. */
function tokenTitle(name) {
  if (name === "operator") return "the operator's token (TOPICSTORE_ADMIN_TOKEN)";
  if (name.startsWith("cli:")) return `the command line on the store itself, run by ${name.slice(4)}`;
  return `a token of tenant ${name.slice(0, name.lastIndexOf(":"))}: the first hex digits of its SHA-256`;
}

function auditFrom(instant) {
  $("#audit-form").elements.from.value = instant;
  reloadAudit();
}

function auditTenant(tenant) {
  $("#audit-form").elements.tenant.value = tenant;
  reloadAudit();
}

/** While a 429's Retry-After runs, Refresh waits too (the next click would be refused). */
function holdAudit(seconds) {
  const button = $("#audit-refresh");
  clearTimeout(auditPaging.hold);
  button.disabled = seconds > 0;
  if (seconds > 0) auditPaging.hold = setTimeout(() => { button.disabled = false; }, seconds * 1000);
}

/** A time as typed in the UTC form ("2026-11-24", "2026-11-24 08:30") as the API's RFC 3339:
 * the missing parts are midnight, whole seconds and UTC. Anything else goes as typed, for the
 * API to say what is wrong with it. */
function rfc3339(text) {
  const m = /^(\d{4}-\d\d-\d\d)(?:[Tt ](\d\d:\d\d)(:\d\d(?:\.\d+)?)?)?([Zz]|[+-]\d\d:\d\d)?$/.exec(text);
  return m ? `${m[1]}T${m[2] ?? "00:00"}${m[3] ?? ":00"}${m[4] ?? "Z"}` : text;
}

async function loadAudit() {
  const form = $("#audit-form");
  const values = Object.fromEntries(new FormData(form));
  const query = {
    action: values.action, limit: values.limit, order: values.order, from: rfc3339(values.from.trim()),
    to: rfc3339(values.to.trim()), after: auditPaging.afters[auditPaging.afters.length - 1],
  };
  const operator = session.role === "operator";
  if (operator) query.tenant = values.tenant.trim();
  const error = $("#audit-error");
  const serial = ++auditPaging.serial;
  try {
    const { data } = await api("GET", "/v1/audit", { query });
    if (serial !== auditPaging.serial) return;
    showError(error, null);
    holdAudit(0);
    auditPaging.next = data.next_after;
    fillRows($("#audit-table"), data.items.map(auditRow), 9, "no admin changes match");
    const page = auditPaging.afters.length;
    const first = data.items.length ? data.items[0].id : null;
    const last = data.items.length ? data.items[data.items.length - 1].id : null;
    $("#audit-info").textContent = data.items.length ? `page ${page} · #${first}–${last} · ${plural(data.items.length, "row")}` : `page ${page} · empty`;
  } catch (e) {
    if (serial !== auditPaging.serial) return;
    showError(error, e);
    if (e instanceof ApiError && e.retryAfter) holdAudit(e.retryAfter);
    fillRows($("#audit-table"), [], 9, "-");
    auditPaging.next = null;
    $("#audit-info").textContent = "";
  }
  const scope = operator ? (query.tenant ? `tenant ${query.tenant}` : "every tenant") : `tenant ${session.tenant}`;
  const filters = [values.action && `action ${values.action}`, query.from && `from ${query.from}`, query.to && `to ${query.to}`].filter(Boolean);
  $("#audit-caption").textContent = `Admin changes of ${scope}${filters.length ? ` · ${filters.join(" · ")}` : ""}`;
  $("#audit-next").disabled = auditPaging.next === null;
  $("#audit-prev").disabled = auditPaging.afters.length < 2;
  $("#audit-first").disabled = auditPaging.afters.length < 2;
}

function reloadAudit() {
  auditPaging.afters = [null];
  return loadAudit();
}

$("#audit-form").addEventListener("submit", (event) => { event.preventDefault(); reloadAudit(); });
$("#audit-form").addEventListener("reset", () => setTimeout(reloadAudit));
$("#audit-refresh").addEventListener("click", () => loadAudit());
// The API pages oldest first: a recent window is the way to today's changes.
for (const button of document.querySelectorAll("#audit-form [data-since]")) {
  button.addEventListener("click", () => {
    const since = new Date(Date.now() - Number(button.dataset.since) * 1000);
    const form = $("#audit-form");
    form.elements.from.value = since.toISOString().replace(/\.\d+Z$/, "Z");
    form.elements.to.value = "";
    reloadAudit();
  });
}
$("#audit-next").addEventListener("click", () => { auditPaging.afters.push(auditPaging.next); loadAudit(); });
$("#audit-prev").addEventListener("click", () => { auditPaging.afters.pop(); loadAudit(); });
$("#audit-first").addEventListener("click", () => { auditPaging.afters = [null]; loadAudit(); });
onShow.audit = () => {
  $("#audit-tenant-field").hidden = session.role !== "operator";
  loadAudit();
};

// -- start ----------------------------------------------------------------------------------

refreshHeader();
setInterval(refreshHeader, 10000);
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) {
  login(saved).catch((e) => logout(e)); // a token the service no longer knows: say so
} else {
  logout();
}
