/**
 * lockgate's web console (the contract is docs/console.md): the
 * cluster, the lock table, a live event stream, sparklines of the
 * cluster's figures (the leader's) and, for an admin, force-release. Plain DOM, no framework;
 * served from the binary at /ui/. The bearer token lives in `api` (memory
 * only); a 401 anywhere forgets it and shows the login form.
 */
import { Client, type Watch, type WatchEvent } from "../../clients/js/src/index.js";
import { Api, ApiError, type ClusterView, type LockDetail, type LocksPage, type LockRow, type MetricsView, type NodeView, type WhoAmI } from "./api.js";
import { clockText, durationText, modeText, ttlText } from "./format.js";
import { clearFigures, showFigures, showNoFigures } from "./sparks.js";

const PageSize = 50;
const MaxEvents = 500;
const PollMs = 1_000;
const TickMs = 250;
const SearchDebounceMs = 300;
const EventRefreshGapMs = 250; // an event refreshes the lock table at most 4 times a second
/** The lock table refreshes at most every ScanPaceFactor times the node's last scan time (docs/console.md). */
const ScanPaceFactor = 20;
const MaxQueryBytes = 256;

// ---------------------------------------------------------------- helpers

function $<T extends Element = HTMLElement>(sel: string): T {
  const e = document.querySelector<T>(sel);
  if (!e) throw new Error(`console: the page has no ${sel}`);
  return e;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  return String(e);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = window.setTimeout(done, ms);
    function done() {
      window.clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

function randomId(): string {
  // getRandomValues works outside secure contexts too (crypto.randomUUID does not).
  const b = new Uint8Array(6);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** truncateUtf8 cuts s to at most max UTF-8 bytes, on a character boundary. */
function truncateUtf8(s: string, max: number): string {
  const enc = new TextEncoder();
  if (enc.encode(s).length <= max) return s;
  let out = "";
  let n = 0;
  for (const ch of s) {
    const b = enc.encode(ch).length;
    if (n + b > max) break;
    out += ch;
    n += b;
  }
  return out;
}

/**
 * Loop runs a task every `ms` after the previous run ended (never two at
 * once); kick() runs it as soon as possible, but no sooner than `minGapMs`
 * after the previous run started.
 */
class Loop {
  #ms: number;
  #minGapMs: number;
  #task: () => Promise<void>;
  #timer = 0;
  #running = false;
  #again = false;
  #stopped = false;
  #lastStart = -Infinity;

  constructor(ms: number, task: () => Promise<void>, minGapMs = 0) {
    this.#ms = ms;
    this.#task = task;
    this.#minGapMs = minGapMs;
  }

  kick(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    window.clearTimeout(this.#timer);
    const wait = Math.max(0, this.#lastStart + this.#minGapMs - performance.now());
    this.#timer = window.setTimeout(() => void this.#run(), wait);
  }

  /** pace sets the period and the least gap between runs (kicks included). */
  pace(ms: number, minGapMs: number): void {
    this.#ms = ms;
    this.#minGapMs = minGapMs;
  }

  stop(): void {
    this.#stopped = true;
    window.clearTimeout(this.#timer);
  }

  async #run(): Promise<void> {
    if (this.#stopped || this.#running) return;
    this.#running = true;
    this.#lastStart = performance.now();
    try {
      await this.#task();
    } catch (e) {
      console.error("console:", e);
    }
    this.#running = false;
    if (this.#stopped) return;
    if (this.#again) {
      this.#again = false;
      this.kick();
      return;
    }
    this.#timer = window.setTimeout(() => void this.#run(), this.#ms);
  }
}

// ---------------------------------------------------------------- state

const api = new Api();
/** The signed-in view's generation: bumped on every sign-in and sign-out, so that answers of an older one are dropped. */
let session = 0;
let me: WhoAmI | undefined;
let loops: Loop[] = [];
let locksLoop: Loop | undefined;
let detailLoop: Loop | undefined;
let stopWatch: (() => void) | undefined;

// ---------------------------------------------------------------- status bar

const problems = new Map<string, string>();
let lastUpdate: Date | undefined;

function setProblem(source: string, e?: unknown): void {
  if (e === undefined) {
    problems.delete(source);
    lastUpdate = new Date();
  } else {
    problems.set(source, messageOf(e));
  }
  renderStatus();
}

function renderStatus(): void {
  const s = $("#status");
  if (problems.size > 0) {
    s.className = "status bad";
    s.textContent = [...problems.entries()].map(([k, v]) => `${k}: ${v}`).join(" · ");
    return;
  }
  if (!me) return;
  s.className = "status ok";
  s.textContent = `Live · node ${me.node}` + (lastUpdate ? ` · updated ${clockText(lastUpdate).slice(0, 8)}` : "");
}

function setStatusText(text: string, cls = ""): void {
  const s = $("#status");
  s.className = "status " + cls;
  s.textContent = text;
}

// ---------------------------------------------------------------- sign-in

function showLogin(error?: string): void {
  endSession();
  api.setToken(undefined);
  me = undefined;
  problems.clear();
  $("#app").hidden = true;
  $("#logout").hidden = true;
  $("#whoami").textContent = "";
  document.title = "lockgate console";
  const form = $<HTMLFormElement>("#login");
  form.hidden = false;
  const err = $("#login-error");
  err.textContent = error ?? "";
  err.hidden = !error;
  setStatusText(error ? "Signed out: " + error : "Sign in to see this node's data.", error ? "bad" : "");
  $<HTMLInputElement>("#token").focus();
}

async function onLogin(ev: SubmitEvent): Promise<void> {
  ev.preventDefault();
  const input = $<HTMLInputElement>("#token");
  const button = $<HTMLButtonElement>("#login-submit");
  const err = $("#login-error");
  const token = input.value.trim();
  if (!token) return;
  button.disabled = true;
  err.hidden = true;
  api.setToken(token);
  try {
    const who = await api.whoami();
    input.value = "";
    enterApp(who);
  } catch (e) {
    api.setToken(undefined);
    err.textContent = e instanceof ApiError && e.status === 401 ? "The node refused this token." : `Cannot sign in: ${messageOf(e)}`;
    err.hidden = false;
    input.select();
  } finally {
    button.disabled = false;
  }
}

/** boot asks who we are without a token: an open node (loopback, no tokens) answers 200. */
async function boot(): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      const who = await api.whoami();
      enterApp(who);
      return;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        showLogin();
        return;
      }
      if (api.token !== undefined || !$("#login").hidden) return; // the user signed in meanwhile
      setStatusText(`Cannot reach the node: ${messageOf(e)} (retrying)`, "bad");
      await sleep(Math.min(5_000, 1_000 * 2 ** attempt));
    }
  }
}

function enterApp(who: WhoAmI): void {
  endSession();
  const gen = ++session;
  me = who;
  problems.clear();
  $("#login").hidden = true;
  $("#login-error").hidden = true;
  $("#app").hidden = false;
  $("#logout").hidden = false;
  $("#whoami").textContent = `node ${who.node} · ${who.credential}${who.admin ? " · admin" : ""}`;
  document.title = `lockgate console — ${who.node}`;
  renderStatus();
  buildAdminActions(who.admin);

  const cluster = new Loop(PollMs, () => refreshCluster(gen));
  locksLoop = new Loop(PollMs, () => refreshLocks(gen), EventRefreshGapMs);
  detailLoop = new Loop(PollMs, () => refreshDetail(gen));
  const metrics = new Loop(PollMs, () => refreshMetrics(gen));
  loops = [cluster, locksLoop, detailLoop, metrics];
  for (const l of loops) l.kick();
  startWatch(gen);
}

/** endSession stops every poll and the watch, and empties the data sections. */
function endSession(): void {
  session++;
  for (const l of loops) l.stop();
  loops = [];
  locksLoop = undefined;
  detailLoop = undefined;
  stopWatch?.();
  stopWatch = undefined;
  // Nothing of the signed-out view's data stays in the page.
  prevLeader = undefined;
  $("#leader").textContent = "—";
  $("#term").textContent = "—";
  $("#cluster-node").textContent = "—";
  $("#lag-warning").hidden = true;
  $("#nodes tbody").replaceChildren();
  $("#locks tbody").replaceChildren();
  $("#lock-total").textContent = "";
  $("#waiters-unknown").hidden = true;
  locks.q = "";
  locks.afters = [""];
  locks.next = "";
  $<HTMLInputElement>("#lock-search").value = "";
  renderPager();
  closeDetail();
  $("#admin-actions").replaceChildren();
  $("#events").replaceChildren();
  paused = false;
  pausedBuffer = [];
  pausedDropped = 0;
  renderPause();
  $("#watch-state").textContent = "";
  clearFigures();
}

// ---------------------------------------------------------------- cluster

let prevLeader: { id: string; term: number } | undefined;

async function refreshCluster(gen: number): Promise<void> {
  let c: ClusterView;
  try {
    c = await api.cluster();
  } catch (e) {
    if (gen === session) setProblem("cluster", e);
    return;
  }
  if (gen !== session) return;
  setProblem("cluster");
  renderCluster(c);
  const leaderId = c.leaderId || "";
  if (prevLeader && (prevLeader.id !== leaderId || prevLeader.term !== c.term)) {
    pushEvent({ type: "leader", text: `${leaderId || "none"} (term ${c.term})`, at: new Date() });
  }
  prevLeader = { id: leaderId, term: c.term };
}

function renderCluster(c: ClusterView): void {
  $("#leader").textContent = c.leaderId || "none";
  $("#term").textContent = String(c.term);
  $("#cluster-node").textContent = c.node;
  const tbody = $("#nodes tbody");
  const old = new Map<string, HTMLTableRowElement>();
  for (const tr of tbody.querySelectorAll<HTMLTableRowElement>("tr[data-node]")) old.set(tr.dataset.node!, tr);
  const rows: HTMLTableRowElement[] = [];
  const lagging: string[] = [];
  for (const n of c.nodes ?? []) {
    const tr = old.get(n.id) ?? nodeRow(n.id);
    fillNodeRow(tr, n, c);
    rows.push(tr);
    if (n.lagging) lagging.push(lagText(n));
  }
  tbody.replaceChildren(...rows);
  const warn = $("#lag-warning");
  warn.hidden = lagging.length === 0;
  warn.textContent = lagging.length ? `⚠ Lagging: ${lagging.join("; ")}` : "";
}

function nodeRow(id: string): HTMLTableRowElement {
  const tr = el("tr");
  tr.dataset.node = id;
  for (const cls of ["id", "addr", "state", "term num", "commit num", "applied num", "contact num", "lag num"]) tr.appendChild(el("td", cls));
  return tr;
}

function fillNodeRow(tr: HTMLTableRowElement, n: NodeView, c: ClusterView): void {
  tr.dataset.state = n.state;
  tr.classList.toggle("lagging", !!n.lagging);
  tr.classList.toggle("self", n.id === c.node);
  tr.classList.toggle("unreachable", n.state === "unreachable");
  const cells = tr.cells;
  cells[0]!.textContent = n.id + (n.id === c.node ? " (this node)" : "");
  cells[1]!.replaceChildren(document.createTextNode(n.apiAddr || "—"));
  if (n.error) cells[1]!.appendChild(el("div", "node-error", n.error));
  cells[2]!.textContent = n.state;
  cells[2]!.className = "state state-" + n.state;
  const known = n.state !== "unreachable";
  cells[3]!.textContent = known ? String(n.term) : "—";
  cells[4]!.textContent = known ? String(n.commitIndex) : "—";
  cells[5]!.textContent = known ? String(n.appliedIndex) : "—";
  cells[6]!.textContent = !known ? "—" : n.state === "leader" ? "leader" : n.lastContactMs < 0 ? "never" : durationText(n.lastContactMs);
  cells[7]!.textContent = n.lagEntries === undefined || !known ? "—" : String(n.lagEntries);
  tr.title = n.error || "";
}

function lagText(n: NodeView): string {
  const parts: string[] = [];
  if (n.lagEntries !== undefined && n.lagEntries > 0) parts.push(`${n.lagEntries} entries behind`);
  if (n.state !== "leader" && n.lastContactMs !== undefined) parts.push(n.lastContactMs < 0 ? "never heard from the leader" : `last contact ${durationText(n.lastContactMs)} ago`);
  return parts.length ? `${n.id} (${parts.join(", ")})` : n.id;
}

// ---------------------------------------------------------------- lock table

const locks = {
  q: "",
  /** The `after` cursor of every page up to the current one (the current is the last). */
  afters: [""] as string[],
  next: "",
};

async function refreshLocks(gen: number): Promise<void> {
  const q = locks.q;
  const after = locks.afters[locks.afters.length - 1]!;
  let page: LocksPage;
  try {
    page = await api.locks(q, after, PageSize);
  } catch (e) {
    if (gen === session) setProblem("locks", e);
    return;
  }
  // A search or page change while this was in flight makes it stale (the loop runs again).
  if (gen !== session || q !== locks.q || after !== locks.afters[locks.afters.length - 1]) return;
  setProblem("locks");
  // A scan visits the whole table (0.1 s at a million keys): refresh at
  // most every ScanPaceFactor scans' time, so that an open page costs the
  // node a few percent of a core whatever the table's size.
  const scan = Math.max(0, page.scanMs ?? 0) * ScanPaceFactor;
  locksLoop?.pace(Math.max(PollMs, scan), Math.max(EventRefreshGapMs, scan));
  renderLocks(page);
}

function renderLocks(page: LocksPage): void {
  const now = performance.now();
  locks.next = page.next || "";
  $("#lock-total").textContent = `${page.total} locks, ${page.matched} matching`;
  $("#waiters-unknown").hidden = page.waitersKnown !== false;
  const rows: HTMLTableRowElement[] = [];
  for (const l of page.locks ?? []) rows.push(lockRow(l, now, page.waitersKnown !== false));
  if (rows.length === 0) {
    const tr = el("tr", "empty");
    const td = el("td", "", locks.q ? "No key matches." : "No locks.");
    td.colSpan = 7;
    tr.appendChild(td);
    rows.push(tr);
  }
  $("#locks tbody").replaceChildren(...rows);
  renderPager();
}

function lockRow(l: LockRow, now: number, waitersKnown: boolean): HTMLTableRowElement {
  const tr = el("tr");
  tr.dataset.key = l.key;
  tr.tabIndex = 0;
  if (l.key === detailKey) tr.classList.add("selected");
  const holders = l.holders ?? [];
  const first = holders[0];
  const more = holders.length > 1 ? ` +${holders.length - 1}` : "";
  const key = el("td", "key mono", l.key);
  key.title = l.key;
  const owner = el("td", "owner", first ? first.owner + more : "—");
  if (holders.length > 1) owner.title = holders.map((h) => h.owner).join(", ");
  const token = el("td", "token mono", first ? first.token + more : "—");
  if (holders.length > 1) token.title = holders.map((h) => h.token).join(", ");
  const ttl = el("td", "ttl num mono");
  if (first) setDeadline(ttl, now + first.expiresInMs, "");
  else if (l.delayMs > 0) setDeadline(ttl, now + l.delayMs, "delay ");
  else ttl.textContent = "—";
  const value = el("td", "value", first ? first.value ?? "" : "");
  value.title = first?.value ?? "";
  const waiters = el("td", "waiters num", waitersKnown ? String(l.waiters) : "?");
  if (l.waiters > 0) waiters.classList.add("has-waiters");
  tr.append(key, el("td", "mode", modeText(l.mode, l.permits)), owner, token, ttl, value, waiters);
  return tr;
}

/** setDeadline makes e count down to a deadline (performance.now() ms) on every tick. */
function setDeadline(e: HTMLElement, deadline: number, prefix: string): void {
  e.dataset.deadline = String(deadline);
  if (prefix) e.dataset.prefix = prefix;
  paintDeadline(e, performance.now());
}

function paintDeadline(e: HTMLElement, now: number): void {
  const left = Number(e.dataset.deadline) - now;
  const text = ttlText(left);
  e.textContent = text === "expired" ? (e.dataset.prefix ? "—" : "expired") : (e.dataset.prefix ?? "") + text;
  e.classList.toggle("expired", !(left > 0));
  e.classList.toggle("soon", left > 0 && left < 3_000);
}

function tick(): void {
  const now = performance.now();
  for (const e of document.querySelectorAll<HTMLElement>("#app [data-deadline]")) paintDeadline(e, now);
}

function renderPager(): void {
  $<HTMLButtonElement>("#prev-page").disabled = locks.afters.length <= 1;
  $<HTMLButtonElement>("#next-page").disabled = !locks.next;
  $("#page-info").textContent = `page ${locks.afters.length}`;
}

let searchTimer = 0;

function onSearchInput(): void {
  window.clearTimeout(searchTimer);
  searchTimer = window.setTimeout(() => {
    const input = $<HTMLInputElement>("#lock-search");
    const q = truncateUtf8(input.value, MaxQueryBytes);
    if (q === locks.q) return;
    locks.q = q;
    locks.afters = [""];
    locks.next = "";
    renderPager();
    locksLoop?.kick();
  }, SearchDebounceMs);
}

function onPage(delta: 1 | -1): void {
  if (delta > 0) {
    if (!locks.next) return;
    locks.afters.push(locks.next);
  } else {
    if (locks.afters.length <= 1) return;
    locks.afters.pop();
  }
  locks.next = "";
  renderPager();
  $("#locks tbody").replaceChildren();
  locksLoop?.kick();
}

function onLockClick(ev: Event): void {
  const tr = (ev.target as Element | null)?.closest<HTMLTableRowElement>("tr[data-key]");
  if (!tr || tr.dataset.key === undefined) return;
  if (ev instanceof KeyboardEvent && ev.key !== "Enter" && ev.key !== " ") return;
  if (ev instanceof KeyboardEvent) ev.preventDefault();
  openDetail(tr.dataset.key);
}

// ---------------------------------------------------------------- one key's detail

let detailKey: string | undefined;
let confirmKey: string | undefined;

function openDetail(key: string): void {
  const panel = $("#lock-detail");
  if (detailKey !== key) {
    $("#detail-holders tbody").replaceChildren();
    $("#queue").replaceChildren();
    $("#queue-count").textContent = "";
    $("#detail-summary").textContent = "Loading…";
    setActionResult("", "");
    hideConfirm();
  }
  detailKey = key;
  panel.dataset.key = key;
  panel.hidden = false;
  $("#detail-key").textContent = key;
  for (const tr of document.querySelectorAll<HTMLElement>("#locks tr.selected")) tr.classList.remove("selected");
  for (const tr of document.querySelectorAll<HTMLTableRowElement>("#locks tr[data-key]")) if (tr.dataset.key === key) tr.classList.add("selected");
  const force = document.querySelector<HTMLButtonElement>("#force-release");
  if (force) force.disabled = false;
  detailLoop?.kick();
}

function closeDetail(): void {
  detailKey = undefined;
  hideConfirm();
  const panel = $("#lock-detail");
  panel.hidden = true;
  delete panel.dataset.key;
  $("#detail-key").textContent = "";
  $("#detail-summary").textContent = "";
  $("#detail-holders tbody").replaceChildren();
  $("#queue").replaceChildren();
  $("#queue-count").textContent = "";
  setActionResult("", "");
  for (const tr of document.querySelectorAll<HTMLElement>("#locks tr.selected")) tr.classList.remove("selected");
}

async function refreshDetail(gen: number): Promise<void> {
  const key = detailKey;
  if (key === undefined) return;
  let d: LockDetail | null;
  try {
    d = await api.lock(key);
  } catch (e) {
    if (gen !== session || key !== detailKey) return;
    if (e instanceof ApiError && e.status === 404) {
      d = null;
    } else {
      setProblem("lock detail", e);
      return;
    }
  }
  if (gen !== session || key !== detailKey) return;
  setProblem("lock detail");
  renderDetail(d);
}

function renderDetail(d: LockDetail | null): void {
  const now = performance.now();
  const holders = d?.holders ?? [];
  const queue = d?.queue ?? [];
  if (!d) {
    $("#detail-summary").textContent = "Nobody holds this key now.";
  } else {
    const parts = [modeText(d.mode, d.permits), `${holders.length} holder${holders.length === 1 ? "" : "s"}`, `${d.waiters} waiting`];
    if (d.delayMs > 0) parts.push(`lock-delay ${durationText(d.delayMs)}`);
    $("#detail-summary").textContent = parts.join(" · ");
  }
  const rows = holders.map((h) => {
    const tr = el("tr");
    tr.dataset.owner = h.owner;
    const ttl = el("td", "ttl num mono");
    setDeadline(ttl, now + h.expiresInMs, "");
    const value = el("td", "value", h.value ?? "");
    value.title = h.value ?? "";
    tr.append(el("td", "owner", h.owner), el("td", "token mono", h.token), ttl, value);
    return tr;
  });
  $("#detail-holders tbody").replaceChildren(...rows);
  const items = queue.map((w, i) => {
    const li = el("li");
    li.dataset.owner = w.owner;
    li.append(el("span", "owner", w.owner), document.createTextNode(" "), el("span", "muted", `waiting ${durationText(w.waitingMs)}`));
    const extra: string[] = [];
    if (w.mode && w.mode !== "exclusive") extra.push(w.mode);
    if (w.permits > 0) extra.push(`${w.permits} permit${w.permits === 1 ? "" : "s"}`);
    if (w.keys && w.keys.length > 1) extra.push(`with ${w.keys.filter((k) => k !== d?.key).join(", ")}`);
    if (extra.length) li.append(document.createTextNode(" "), el("span", "muted", `(${extra.join(", ")})`));
    li.title = `#${i + 1} in the queue`;
    return li;
  });
  $("#queue").replaceChildren(...items);
  const total = d?.waiters ?? 0;
  $("#queue-count").textContent = total > queue.length ? `(${queue.length} of ${total} shown)` : `(${total})`;
}

// ---------------------------------------------------------------- force-release (admin)

function buildAdminActions(admin: boolean): void {
  const box = $("#admin-actions");
  box.replaceChildren();
  if (!admin) return;
  const force = el("button", "danger", "Force-release…");
  force.id = "force-release";
  force.type = "button";
  force.addEventListener("click", askForceRelease);
  const confirmBox = el("div", "confirm");
  confirmBox.id = "confirm-box";
  confirmBox.hidden = true;
  confirmBox.setAttribute("role", "alertdialog");
  const text = el("p", "confirm-text");
  text.id = "confirm-text";
  const yes = el("button", "danger", "Force-release");
  yes.id = "confirm-force";
  yes.type = "button";
  yes.addEventListener("click", () => void doForceRelease());
  const no = el("button", "", "Cancel");
  no.id = "cancel-force";
  no.type = "button";
  no.addEventListener("click", hideConfirm);
  confirmBox.append(text, yes, no);
  box.append(force, confirmBox);
}

function askForceRelease(): void {
  if (detailKey === undefined || !me?.admin) return;
  confirmKey = detailKey;
  $("#confirm-text").textContent = `Force-release “${confirmKey}”? Every holder loses it now (their fencing tokens go stale) and the next waiters are granted.`;
  $("#confirm-box").hidden = false;
  $<HTMLButtonElement>("#force-release").disabled = true;
  $<HTMLButtonElement>("#cancel-force").focus();
}

function hideConfirm(): void {
  confirmKey = undefined;
  const box = document.getElementById("confirm-box");
  if (box) box.hidden = true;
  const force = document.querySelector<HTMLButtonElement>("#force-release");
  if (force) force.disabled = false;
}

async function doForceRelease(): Promise<void> {
  const key = confirmKey;
  const gen = session;
  hideConfirm();
  if (key === undefined) return;
  setActionResult(`Releasing “${key}”…`, "pending");
  try {
    const r = await api.forceRelease(key);
    if (gen !== session) return;
    const n = r.released ?? 0;
    setActionResult(`Force-released “${key}”: released ${n} holder${n === 1 ? "" : "s"}.`, "ok");
  } catch (e) {
    if (gen !== session) return;
    setActionResult(`Force-release of “${key}” failed: ${messageOf(e)}`, "bad");
  }
  locksLoop?.kick();
  detailLoop?.kick();
}

function setActionResult(text: string, cls: string): void {
  const r = $("#action-result");
  r.textContent = text;
  r.className = "action-result " + cls;
}

// ---------------------------------------------------------------- event stream

type EventType = "granted" | "released" | "expired" | "leader" | "error" | "dropped";

interface ConsoleEvent {
  type: EventType;
  text: string;
  at: Date;
}

let paused = false;
let pausedBuffer: ConsoleEvent[] = [];
let pausedDropped = 0;

function pushEvent(e: ConsoleEvent): void {
  if (paused) {
    pausedBuffer.push(e);
    while (pausedBuffer.length > MaxEvents) {
      pausedBuffer.shift();
      pausedDropped++;
    }
    renderPause();
    return;
  }
  showEvent(e);
}

function showEvent(e: ConsoleEvent): void {
  const list = $("#events");
  const li = el("li", "event");
  li.dataset.type = e.type;
  // Spaces between the parts, so that the item's text reads "12:00:01.234 granted orders/42 — owner …".
  li.append(el("time", "at mono", clockText(e.at)), " ", el("span", "kind", e.type), " ", el("span", "what", e.text));
  list.prepend(li);
  while (list.childElementCount > MaxEvents) list.lastElementChild!.remove();
}

function renderPause(): void {
  const b = $<HTMLButtonElement>("#pause");
  const n = pausedBuffer.length;
  b.textContent = paused ? `Resume (${n}${pausedDropped ? "+" : ""} new)` : "Pause";
  b.setAttribute("aria-pressed", String(paused));
  b.classList.toggle("paused", paused);
}

function togglePause(): void {
  if (!paused) {
    paused = true;
    renderPause();
    return;
  }
  paused = false;
  const buffered = pausedBuffer;
  const dropped = pausedDropped;
  pausedBuffer = [];
  pausedDropped = 0;
  if (dropped > 0) showEvent({ type: "dropped", text: `${dropped} older event${dropped === 1 ? "" : "s"} not kept while paused (at most ${MaxEvents} are)`, at: buffered[0]?.at ?? new Date() });
  for (const e of buffered) showEvent(e);
  renderPause();
}

function eventText(ev: WatchEvent): string {
  const parts = [ev.key];
  const who: string[] = [];
  if (ev.owner) who.push(`owner ${ev.owner}`);
  if (ev.fencingToken !== undefined) who.push(`token ${ev.fencingToken.toString()}`);
  if (ev.mode === "shared") who.push("shared");
  if (ev.permits > 0) who.push(`${ev.permits} permits`);
  if (ev.value) who.push(`value ${JSON.stringify(ev.value.length > 80 ? ev.value.slice(0, 80) + "…" : ev.value)}`);
  if (who.length) parts.push("— " + who.join(", "));
  return parts.join(" ");
}

/** The node's WebSocket relay to the leader (console.PathRelay). */
const RelayPath = "/v1/console/ws";

/**
 * NodeWebSocket is the page's WebSocket. The page may connect to its own
 * node only (the console's Content-Security-Policy: connect-src 'self'),
 * and a watch needs the leader, which a follower names in a not_leader
 * redirect: a dial to any other address goes to the node's relay instead,
 * which carries it to the leader.
 */
class NodeWebSocket extends WebSocket {
  constructor(url: string | URL, protocols?: string | string[]) {
    const u = new URL(url);
    if (u.host !== location.host) {
      u.host = location.host;
      u.pathname = RelayPath;
      u.search = "";
    }
    super(u, protocols);
  }
}

function startWatch(gen: number): void {
  const stop = new AbortController();
  const secure = location.protocol === "https:";
  const token = api.token;
  let client: Client | undefined;
  try {
    client = new Client([(secure ? "wss://" : "ws://") + location.host], {
      clientId: "console-" + randomId(),
      webSocket: NodeWebSocket,
      ...(token !== undefined ? { token } : {}),
    });
  } catch (e) {
    pushEvent({ type: "error", text: `cannot open the event stream: ${messageOf(e)}`, at: new Date() });
    return;
  }
  stopWatch = () => {
    stop.abort();
    void client?.close().catch(() => {});
  };
  void watchLoop(gen, client, stop.signal);
}

async function watchLoop(gen: number, client: Client, signal: AbortSignal): Promise<void> {
  const state = $("#watch-state");
  let failures = 0;
  while (gen === session && !signal.aborted) {
    state.textContent = "connecting…";
    let w: Watch;
    try {
      // `prefix` watches every key under the prefix ("": all of them); docs/console.md.
      w = await client.watch("", { prefix: true, signal });
    } catch (e) {
      if (gen !== session || signal.aborted) return;
      failures++;
      const wait = Math.min(5_000, 1_000 * 2 ** (failures - 1));
      state.textContent = "disconnected";
      pushEvent({ type: "error", text: `event stream unavailable: ${messageOf(e)} (retrying in ${wait / 1000} s)`, at: new Date() });
      await sleep(wait, signal);
      continue;
    }
    failures = 0;
    state.textContent = "live";
    try {
      for await (const ev of w) {
        if (gen !== session) break;
        onWatchEvent(ev);
      }
      if (gen !== session || signal.aborted) return;
      pushEvent({ type: "dropped", text: "the event stream ended; watching again (events in between are missed)", at: new Date() });
    } catch (e) {
      if (gen !== session || signal.aborted) return;
      const code = (e as { code?: string }).code;
      if (code === "watch_overflow") {
        pushEvent({ type: "dropped", text: "events were dropped: the stream fell behind (watch_overflow); watching again", at: new Date() });
      } else {
        pushEvent({ type: "error", text: `event stream interrupted: ${messageOf(e)}; watching again (events in between are missed)`, at: new Date() });
      }
    }
    state.textContent = "reconnecting…";
    await sleep(1_000, signal);
  }
}

function onWatchEvent(ev: WatchEvent): void {
  if (ev.type !== "granted" && ev.type !== "released" && ev.type !== "expired") return; // holder/synced: no current holders are sent for a prefix watch
  pushEvent({ type: ev.type, text: eventText(ev), at: new Date() });
  locksLoop?.kick();
  if (ev.key === detailKey) detailLoop?.kick();
}

// ---------------------------------------------------------------- sparklines

async function refreshMetrics(gen: number): Promise<void> {
  let v: MetricsView;
  try {
    v = await api.metrics();
  } catch (e) {
    if (gen !== session) return;
    setProblem("metrics", e);
    showNoFigures("the node did not answer");
    return;
  }
  if (gen !== session) return;
  setProblem("metrics");
  showFigures(v);
}

// ---------------------------------------------------------------- wiring

function init(): void {
  api.onUnauthorized = () => {
    if (me) showLogin("the node refused the token (401): sign in again.");
  };
  $<HTMLFormElement>("#login").addEventListener("submit", (ev) => void onLogin(ev as SubmitEvent));
  $("#logout").addEventListener("click", () => showLogin());
  $("#lock-search").addEventListener("input", onSearchInput);
  $("#prev-page").addEventListener("click", () => onPage(-1));
  $("#next-page").addEventListener("click", () => onPage(1));
  const tbody = $("#locks tbody");
  tbody.addEventListener("click", onLockClick);
  tbody.addEventListener("keydown", onLockClick);
  $("#close-detail").addEventListener("click", closeDetail);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && detailKey !== undefined) {
      if (confirmKey !== undefined) hideConfirm();
      else closeDetail();
    }
  });
  $("#pause").addEventListener("click", togglePause);
  window.setInterval(tick, TickMs);
  clearFigures();
  void boot();
}

init();
