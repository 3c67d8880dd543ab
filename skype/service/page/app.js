// The live page's logic.  On load (and on "reload") it reads GET /healthz, GET /v1/results and
// the first MAX_DRAWN subscriptions' records (one page of GET /v1/subscriptions, or, for a token
// that may not list them, GET /v1/subscriptions/{id} each), and draws them.  Choosing a
// subscription (list or map click) opens an EventSource on /v1/subscriptions/{id}/events?after=0
// and folds its events into the top-k list: a reset replaces the list, `left` goes before
// `entered` comes, entries ranked by score (the one that entered last first among equal
// scores).  after=0 replays the retained events from the start or opens with a reset, so the
// folded list equals the server's result; the browser resumes a dropped stream by itself with
// Last-Event-ID.  The recent messages (GET /v1/messages?last=MAX_MESSAGES) are read at start
// and every MESSAGES_EVERY_MS, and drawn as small dots under the subscriptions; the chosen
// subscription's result messages among them are ringed.  Each top-k entry says what the message
// is: its text (or terms) and place, from the records of GET /v1/messages (the recent ones, and
// GET /v1/messages?ids=... for the entries not among them; an entry whose message has left the
// window says so).  A click on an entry marks its message on the map (canvas data-marked = its
// id).  The token (field in the header) is kept in localStorage and sent as
// "Authorization: Bearer" on fetches and as ?token= on the EventSource (which cannot set headers).
"use strict";

const MAX_DRAWN = 2000;     // subscriptions whose records are fetched and drawn
const MAX_EVENTS = 50;      // lines in the recent-events list
const MAX_MESSAGES = 200;   // newest window messages drawn
const MESSAGES_EVERY_MS = 2000;
const RESULT_FIELDS = ["topk", "matches", "terms"];
const MAX_TEXT = 60;        // characters of a message's text shown in an entry

const page = {
  map: new SkypeMap(document.getElementById("map")),
  subs: new Map(),          // id -> {id, x, y, k, kind, record}
  results: new Map(),       // id -> results-file line
  messages: [],             // the newest window messages' records, newest last
  loadingMessages: false,
  chosen: null,             // chosen subscription id
  entries: [],              // the chosen subscription's result entries, folded from events
  source: null,             // its EventSource
  lastSeq: null,
  records: new Map(),       // message id -> its record (null: asked for, not in the window)
  asking: new Set(),        // message ids being fetched
  marked: null,             // the message id marked on the map
};
window.skypePage = page;

function token() { return localStorage.getItem("skype.token") || ""; }

function headers() {
  const t = token();
  return t ? { "Authorization": `Bearer ${t}` } : {};
}

function showError(text) { document.getElementById("error").textContent = text || ""; }

async function api(path) {
  const resp = await fetch(path, { headers: headers() });
  if (!resp.ok) {
    let detail = `${resp.status} ${resp.statusText}`;
    try {
      const body = await resp.json();
      if (body.error) detail = `${resp.status}: ${body.error.message} [${body.error.code}]`;
    } catch (e) { /* not JSON */ }
    throw new Error(`${path}: ${detail}`);
  }
  return resp;
}

function resultField(line) { return RESULT_FIELDS.find((f) => f in line); }

async function loadHealth() {
  try {
    const h = await (await api("/healthz")).json();
    document.getElementById("health").textContent =
      `${h.status} · ${h.subscriptions} subscriptions · window ${h.window} · position ${h.position}`;
  } catch (e) {
    document.getElementById("health").textContent = "server unreachable";
  }
}

async function loadAll() {
  showError("");
  try {
    const text = await (await api("/v1/results")).text();
    page.results.clear();
    for (const raw of text.split("\n")) {
      if (raw.trim()) { const line = JSON.parse(raw); page.results.set(line.id, line); }
    }
    const ids = [...page.results.keys()].sort((a, b) => a - b).slice(0, MAX_DRAWN);
    page.subs.clear();
    const add = (rec) => {
      const [x, y] = "x" in rec ? [rec.x, rec.y] :
        rec.rect ? [(rec.rect[0] + rec.rect[2]) / 2, (rec.rect[1] + rec.rect[3]) / 2] : [NaN, NaN];
      page.subs.set(rec.id, { id: rec.id, x, y, k: rec.k, kind: rec.kind || "topk", record: rec });
    };
    try {  // one page of records (GET /v1/subscriptions: publisher or admin)
      const body = await (await api(`/v1/subscriptions?limit=${MAX_DRAWN}`)).json();
      for (const rec of body.subscriptions) add(rec);
    } catch (e) {  // a token that may not list them: one request per subscription it may read
      await Promise.all(ids.map(async (id) => {
        try {
          add((await (await api(`/v1/subscriptions/${id}`)).json()).subscription);
        } catch (e2) { /* owned by someone else: listed, not drawn */ }
      }));
    }
    document.getElementById("sub-count").textContent =
      `(${page.results.size}${page.results.size > MAX_DRAWN ? `, first ${MAX_DRAWN} drawn` : ""})`;
    renderList();
    draw();
  } catch (e) {
    showError(String(e.message || e));
  }
  loadHealth();
}

async function loadMessages() {
  if (page.loadingMessages) return;
  page.loadingMessages = true;
  const status = document.getElementById("msg-count");
  try {
    const text = await (await api(`/v1/messages?last=${MAX_MESSAGES}`)).text();
    page.messages = text.split("\n").filter((raw) => raw.trim()).map((raw) => JSON.parse(raw));
    for (const m of page.messages) page.records.set(m.id, m);
    draw();
  } catch (e) {
    status.textContent = `messages: ${e.message || e}`;
  } finally {
    page.loadingMessages = false;
  }
}

function renderList() {
  const ul = document.getElementById("subs");
  ul.replaceChildren();
  for (const id of [...page.results.keys()].sort((a, b) => a - b).slice(0, MAX_DRAWN)) {
    const li = document.createElement("li");
    const s = page.subs.get(id);
    li.dataset.id = id;
    li.textContent = s ? `#${id} ${s.kind} k=${s.k ?? "-"} (${fmt(s.x)}, ${fmt(s.y)})` : `#${id}`;
    if (id === page.chosen) li.classList.add("chosen");
    li.addEventListener("click", () => choose(id));
    ul.appendChild(li);
  }
}

function fmt(v) { return Number.isFinite(v) ? v.toFixed(2) : "?"; }

function draw() {
  const points = [...page.subs.values()].filter((s) => Number.isFinite(s.x));
  const msgs = page.messages.filter((m) => Number.isFinite(m.x) && Number.isFinite(m.y));
  page.map.fit(points.map((s) => [s.x, s.y]).concat(msgs.map((m) => [m.x, m.y])));
  page.map.drawBase();
  for (const m of msgs) page.map.dot(m.x, m.y, 1.5, "#d03060");
  for (const s of points) page.map.dot(s.x, s.y, 3, "#2a6fb0");
  // the chosen subscription's result messages that are among the drawn ones
  const inResult = new Set(page.entries.filter((e) => typeof e === "object" && "id" in e).map((e) => e.id));
  const ringed = msgs.filter((m) => inResult.has(m.id));
  for (const m of ringed) page.map.dot(m.x, m.y, 4, "#2fb344", "#155d22");
  const canvas = page.map.canvas;
  canvas.dataset.messages = String(msgs.length);
  canvas.dataset.highlighted = String(ringed.length);
  document.getElementById("msg-count").textContent =
    `${msgs.length} recent messages` + (page.chosen !== null ? `, ${ringed.length} in #${page.chosen}'s result` : "");
  const c = page.subs.get(page.chosen);
  if (c && Number.isFinite(c.x)) page.map.dot(c.x, c.y, 7, "#f0a000", "#7a5200");
  const marked = page.marked === null ? null : page.records.get(page.marked);
  if (marked && Number.isFinite(marked.x) && Number.isFinite(marked.y)) {
    page.map.dot(marked.x, marked.y, 9, "rgba(0,0,0,0)", "#6a1b9a");
    page.map.dot(marked.x, marked.y, 3, "#6a1b9a");
    canvas.dataset.marked = String(page.marked);
  } else {
    delete canvas.dataset.marked;
  }
  const [minx, miny, maxx, maxy] = page.map.bounds;
  document.getElementById("extent").textContent = `view ${minx},${miny} – ${maxx},${maxy}`;
}

// ------------------------------------------------------------------ the chosen subscription

function choose(id) {
  if (page.source) page.source.close();
  page.chosen = id;
  page.entries = [];
  page.lastSeq = null;
  page.marked = null;
  document.getElementById("chosen").textContent = `#${id}`;
  document.getElementById("events").replaceChildren();
  renderList();
  draw();
  renderTopk(new Set());
  const t = token();
  const url = `/v1/subscriptions/${id}/events?after=0` + (t ? `&token=${encodeURIComponent(t)}` : "");
  const source = new EventSource(url);
  page.source = source;
  const status = document.getElementById("stream");
  source.onopen = () => { status.textContent = "live"; };
  source.onerror = () => {
    status.textContent = source.readyState === EventSource.CLOSED ? "stream closed (reload to retry)" : "reconnecting…";
  };
  source.onmessage = (msg) => {
    if (page.source !== source) return;
    const event = JSON.parse(msg.data);
    if (page.lastSeq !== null && event.seq <= page.lastSeq) return;
    page.lastSeq = event.seq;
    const fresh = fold(event);
    renderTopk(fresh);
    draw();
    logEvent(event);
  };
}

// Fold one event into page.entries; returns the keys that entered.
function fold(event) {
  const kind = (page.subs.get(event.sub) || {}).kind || "topk";
  const keyOf = kind === "terms" ? (e) => e.term : kind === "range" ? (e) => e : (e) => e.id;
  if ("reset" in event) {
    page.entries = [...event.reset[resultField(event.reset)]];
    return new Set(page.entries.map(keyOf));
  }
  if (event.removed) { page.entries = []; return new Set(); }
  const gone = new Set(event.left || []);
  const fresh = [...(event.entered || [])];
  let merged = [...fresh].reverse().concat(page.entries.filter((e) => !gone.has(keyOf(e))));
  if (kind === "topk") merged.sort((a, b) => b.score - a.score);        // stable
  else if (kind === "knn") merged.sort((a, b) => a.distance - b.distance);
  else if (kind === "terms") merged.sort((a, b) => b.count - a.count);
  else merged = page.entries.filter((e) => !gone.has(keyOf(e))).concat(fresh);
  page.entries = merged;
  return new Set(fresh.map(keyOf));
}

function renderTopk(fresh) {
  const ol = document.getElementById("topk");
  ol.replaceChildren();
  for (const e of page.entries) {
    const li = document.createElement("li");
    if (typeof e === "object" && "id" in e) {
      li.dataset.id = e.id;
      const value = "score" in e ? e.score : e.distance;
      li.dataset.value = value;
      describe(li, e.id, Number(value).toFixed(6));
      if (fresh.has(e.id)) li.classList.add("fresh");
    } else if (typeof e === "object") {
      li.dataset.id = e.term;
      li.textContent = `${e.term}  ${e.count}`;
    } else {
      li.dataset.id = e;
      describe(li, e, null);
    }
    ol.appendChild(li);
  }
  ol.dataset.seq = page.lastSeq === null ? "" : String(page.lastSeq);
  askRecords();
}

// An entry of message `id`: id, value, then what the message is (text or terms, and place).
// A click marks the message on the map.
function describe(li, id, value) {
  const head = document.createElement("span");
  head.className = "entry-head";
  head.textContent = value === null ? `msg ${id}` : `msg ${id}  ${value}`;
  const what = document.createElement("span");
  what.className = "entry-what";
  const rec = page.records.get(id);
  if (rec === undefined) {
    what.textContent = "…";
  } else if (rec === null) {
    what.textContent = "(no longer in the window)";
  } else {
    what.textContent = `(${fmt(rec.x)}, ${fmt(rec.y)}) ${messageText(rec)}`;
    li.dataset.text = messageText(rec);
    li.dataset.place = `${rec.x},${rec.y}`;
  }
  li.append(head, what);
  li.classList.add("entry");
  if (id === page.marked) li.classList.add("marked");
  li.addEventListener("click", () => mark(id));
}

function messageText(rec) {
  const text = typeof rec.text === "string" ? rec.text :
    rec.terms ? Object.keys(rec.terms).join(" ") : "";
  return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT - 1) + "…" : text;
}

function mark(id) {
  page.marked = page.marked === id ? null : id;
  for (const li of document.querySelectorAll("#topk li.entry")) {
    li.classList.toggle("marked", Number(li.dataset.id) === page.marked);
  }
  draw();
}

// Fetch the records of the shown entries the page does not have (GET /v1/messages?ids=...).
async function askRecords() {
  const ids = page.entries.map((e) => (typeof e === "object" ? e.id : e))
    .filter((id) => Number.isInteger(id) && !page.records.has(id) && !page.asking.has(id));
  if (!ids.length) return;
  for (const id of ids) page.asking.add(id);
  try {
    const text = await (await api(`/v1/messages?ids=${ids.join(",")}`)).text();
    const found = new Map(text.split("\n").filter((raw) => raw.trim()).map((raw) => JSON.parse(raw))
      .map((rec) => [rec.id, rec]));
    for (const id of ids) page.records.set(id, found.get(id) || null);
    renderTopk(new Set());
    draw();
  } catch (e) {
    showError(String(e.message || e));
  } finally {
    for (const id of ids) page.asking.delete(id);
  }
}

function logEvent(event) {
  const ul = document.getElementById("events");
  const li = document.createElement("li");
  const what = "reset" in event ? "reset" : event.removed ? "removed" :
    `+${(event.entered || []).length} −${(event.left || []).length}`;
  li.textContent = `seq ${event.seq} @${event.position}: ${what}`;
  ul.prepend(li);
  while (ul.children.length > MAX_EVENTS) ul.lastChild.remove();
}

// ------------------------------------------------------------------ wiring

const tokenInput = document.getElementById("token");
tokenInput.value = token();
tokenInput.addEventListener("change", () => {
  localStorage.setItem("skype.token", tokenInput.value.trim());
  loadAll();
  loadMessages();
  if (page.chosen !== null) choose(page.chosen);
});
document.getElementById("reload").addEventListener("click", loadAll);
document.getElementById("map").addEventListener("click", (ev) => {
  const canvas = ev.target;
  const rect = canvas.getBoundingClientRect();
  const px = (ev.clientX - rect.left) * canvas.width / rect.width;
  const py = (ev.clientY - rect.top) * canvas.height / rect.height;
  const hit = page.map.nearest([...page.subs.values()], px, py, 10);
  if (hit) choose(hit.id);
});
const wanted = Number(new URLSearchParams(location.search).get("sub"));
loadAll().then(() => { if (Number.isInteger(wanted) && page.results.has(wanted)) choose(wanted); });
loadMessages();
setInterval(loadMessages, MESSAGES_EVERY_MS);
setInterval(loadHealth, 2000);
