// The chat app served at `/`. Everything the agent or the server sends is put in the page
// with textContent / attributes of our choosing; never as HTML.
import { HermesClient, HermesError, charCount, newDeviceId, newId, pairWithCode, MAX_TEXT_CHARS } from '/protocol.js';
import { initPush, initNotificationOpen, registerServiceWorker } from '/push.js';
import { hasHiddenChars, kindFromMime, splitHiddenChars } from '/protocol.js';
import { pairsThisPage, renderMarkdown } from '/markdown.js';
import { History, journalKey, mediaRecord, recordOfItem } from '/history.js';
import { initVoice } from '/voice.js';
import { initDevices } from '/devices.js';

const $ = (id) => document.getElementById(id);
const ui = {
  pair: $('pair'), tokenInput: $('token-input'), pairError: $('pair-error'), pairButton: $('pair-button'),
  forget: $('forget-button'), status: $('status'), retry: $('retry-button'),
  avatarState: $('avatar-state'), avatarFrame: $('avatar-frame'), typing: $('typing'), notice: $('notice'),
  chat: $('chat'), messages: $('messages'), bar: $('composer-bar'), composer: $('composer'), send: $('send-button'),
  fileInput: $('file-input'), attach: $('attach-button'), caption: $('caption-input'), mic: $('mic-button'),
  counter: $('counter'), drop: $('drop-zone'), recLine: $('rec-line'), recTime: $('rec-time'),
  tokenDialog: $('token-dialog'), forgetDialog: $('forget-dialog'),
};
const KEY_TOKEN = 'hermes.token';
const KEY_DEVICE = 'hermes.deviceId';

let client = null;
let status = { state: 'offline' };
const bubbles = new Map(); // message / media id → .msg element
const cards = new Map(); // prompt id → { el, card }
const closedAway = new Map(); // prompt id → the promptdone of a card not shown when it came
const owned = new WeakMap(); // .msg element → { key, urls }: its bubbles key and blob: URLs
const MAX_ITEMS = 300; // bubbles and cards kept in #messages; the oldest go first

// ---- storage (it may be unavailable: private modes) -------------------------------------

const store = {
  get: (k) => { try { return localStorage.getItem(k); } catch { return null; } },
  set: (k, v) => { try { localStorage.setItem(k, v); } catch { /* kept in memory only */ } },
  del: (k) => { try { localStorage.removeItem(k); } catch { /* nothing */ } },
};

// ---- small DOM helpers ---------------------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

const ICONS = {
  file: 'M6 2h8l6 6v12a2 2 0 0 1-2 2H6a2 2 0 0 1-2-2V4a2 2 0 0 1 2-2zm7 1.5V9h5.5z',
  link: 'M10.6 13.4a1 1 0 0 1 0-1.4l3.5-3.5a1 1 0 1 1 1.4 1.4L12 13.4a1 1 0 0 1-1.4 0zM8 20a5 5 0 0 1-3.5-8.5l2.1-2.1 1.4 1.4-2.1 2.1a3 3 0 0 0 4.2 4.2l2.1-2.1 1.4 1.4-2.1 2.1A5 5 0 0 1 8 20zm9.4-5.4L16 13.2l2.1-2.1a3 3 0 0 0-4.2-4.2L11.8 9l-1.4-1.4 2.1-2.1a5 5 0 0 1 7 7z',
  mic: 'M12 15a3.5 3.5 0 0 0 3.5-3.5v-6a3.5 3.5 0 0 0-7 0v6A3.5 3.5 0 0 0 12 15zm6-3.5h-1.7a4.3 4.3 0 0 1-8.6 0H6a6 6 0 0 0 5 5.9V21h2v-3.6a6 6 0 0 0 5-5.9z',
};

function icon(name) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('class', 'icon');
  const p = document.createElementNS(ns, 'path');
  p.setAttribute('fill', 'currentColor');
  p.setAttribute('d', ICONS[name]);
  svg.append(p);
  return svg;
}

function fmtSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function fmtTime(d = new Date()) {
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

// A blob: URL that lives as long as the bubble `owner`: it is revoked when that is dropped.
function blobUrl(blob, owner) {
  const u = URL.createObjectURL(blob);
  owned.get(owner).urls.push(u);
  return u;
}

let noticeTimer = null;
function notice(text, kind = 'error') {
  ui.notice.textContent = text;
  ui.notice.dataset.kind = kind;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => (ui.notice.textContent = ''), 20000);
}
ui.notice.addEventListener('click', () => (ui.notice.textContent = ''));

// ---- the message list ----------------------------------------------------------------------

function nearBottom() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
}

function keepBottom(stick, fn) {
  const was = stick || nearBottom();
  const r = fn();
  if (was) ui.messages.scrollTop = ui.messages.scrollHeight;
  return r;
}

// `key` tells bubbles apart in this page: agent message and media ids are the agent's and
// may come again after a restart; user ids are ours. `jseq`: its journal seq, if it has one.
function bubble(from, id, key = id, jseq = null) {
  attachLive();
  const m = newBubble(from, id, key, orderKey(jseq), new Date());
  setJseq(m, jseq);
  place(m);
  trimMessages();
  return m;
}

// A bubble not yet in the page: a live one (bubble()) or one from history. `at` is null for
// an item of the gateway's journal, which keeps no time.
function newBubble(from, id, key, seq, at) {
  const m = el('div', 'msg');
  m.dataset.from = from;
  m.dataset.id = id;
  m.dataset.final = 'false';
  m.dataset.seq = String(seq);
  m.append(el('span', 'msg-meta', at ? fmtTime(at) : ''));
  bubbles.set(key, m);
  owned.set(m, { key, urls: [] });
  return m;
}

// The order key (data-seq, a history record's `seq`) of a new item: from its journal seq
// when it has one, else one past the largest so far (the person's own message before its
// `received`, anything from a gateway without a journal).
function orderKey(jseq) {
  const key = Number.isInteger(jseq) ? journalKey(jseq) : Math.max(Date.now() * 1000, past.lastKey + 1);
  past.lastKey = Math.max(past.lastKey, key);
  return key;
}

function setJseq(n, jseq) {
  if (Number.isInteger(jseq)) n.dataset.jseq = String(jseq);
}

// Puts `n` into #messages in order of its key: at the end for anything live, further up for
// an entry the journal gives late (a reply replayed after a message sent since, a `history` item).
function place(n) {
  const key = Number(n.dataset.seq);
  let before = ui.messages.lastElementChild;
  while (before && Number(before.dataset.seq) > key) before = before.previousElementSibling;
  if (before) before.after(n);
  else ui.messages.prepend(n);
}

// Removes a bubble or card: its blob: URLs are revoked and it leaves `bubbles` / `cards`.
function dropItem(n) {
  const o = owned.get(n);
  if (o) {
    for (const u of o.urls) URL.revokeObjectURL(u);
    o.urls.length = 0;
    if (bubbles.get(o.key) === n) bubbles.delete(o.key);
  }
  const c = n.dataset.promptId && cards.get(n.dataset.promptId);
  if (c && c.el === n) cards.delete(n.dataset.promptId);
  n.remove();
}

// At most MAX_ITEMS in #messages, so a long-open page does not grow for ever. Open cards
// stay (they wait for an answer); the view does not jump when the user has scrolled up.
function trimMessages() {
  const box = ui.messages;
  let extra = box.childElementCount - MAX_ITEMS;
  if (extra <= 0) return;
  const top = box.scrollTop;
  const height = box.scrollHeight;
  for (let n = box.firstElementChild; n && extra > 0;) {
    const next = n.nextElementSibling;
    if (!isOpenCard(n)) {
      dropItem(n);
      extra--;
      past.noOlder = past.gatewayDone = false; // what was dropped can be loaded again
      past.journalBefore = null;
    }
    n = next;
  }
  box.scrollTop = top - (height - box.scrollHeight);
}

const isOpenCard = (n) => n.classList.contains('card') && n.dataset.state === 'open';

function mediaBubble(id, jseq) {
  const m = bubbles.get('f:' + id);
  // One from history is the same file delivered again after a reload: it is replaced.
  return m && (m.dataset.final !== 'true' || past.restored.has(m)) ? m : bubble('agent', id, 'f:' + id, jseq);
}

function setBody(m, ...nodes) {
  m.replaceChildren(...nodes, m.querySelector('.msg-meta'));
}

// `jseq`: the journal's seq of a message the gateway confirmed with `received`.
function markBubble(id, state, why, jseq = null) {
  const m = bubbles.get(id);
  if (!m) return;
  if (state === 'final') m.dataset.final = 'true';
  setJseq(m, jseq);
  if (state === 'final' || state === 'failed') rememberPatch(m, { final: state === 'final', failed: state === 'failed' ? why : undefined });
  if (state === 'failed') {
    m.classList.add('failed');
    m.querySelector('.msg-meta').textContent = `${fmtTime()} · ${why}`;
  }
  const up = m.querySelector('.upload');
  if (up) {
    up.dataset.state = state === 'final' ? 'done' : state === 'failed' ? 'error' : up.dataset.state;
    if (state === 'final') up.querySelector('progress').value = 100;
  }
}

// ---- history (history.js): this device's chat, shown again after a reload or offline -------
//
// #messages is a window of at most MAX_ITEMS over the history: scrolling to the top loads
// older items and, past the cap, drops the newest ones; scrolling back down loads them again.
// Anything live while the window is away from the end first brings it back there.
//
// With a gateway that keeps a journal (issue 24), IndexedDB is a cache of it: the page
// resumes after the journal seq it stored, and the gateway replays what came since; its
// `history` pages fill a new device's view, give the person's own messages the replay leaves
// out, and go on where the cache ends when the user scrolls up.

const PAGE_FIRST = 100; // items shown at start
const PAGE = 50; // items loaded per scroll to an end
const past = {
  history: null, // History of this device (history.js), or null before start()
  device: null,
  generation: 0, // counts openHistory/forgetHistory calls: a late open is dropped
  restored: new WeakSet(), // elements shown from history, not from this connection
  records: new WeakMap(), // element → its record, kept so that an update rewrites it whole
  noOlder: false, // the window's first item is the oldest kept on this device
  gatewayDone: false, // ... and the journal has nothing older either
  journalBefore: null, // the lowest seq of the history pages read back (items not shown too)
  detached: false, // the newest items are not in the window
  loading: false,
  lastKey: 0, // the largest order key given or stored (orderKey)
  journal: false, // the gateway keeps a journal (last `ready`, or a journal seq stored)
  fill: null, // a new device fills its view from `history`: {events} the replay sent meanwhile
  heldSeq: null, // while the view catches up with the journal: the seq to store after it
};

// The client's seqStore: the journal seq goes into IndexedDB with the records it covers, and
// not before a catch-up with the journal is in them too (heldSeq).
const seqStore = {
  load: () => (past.history ? past.history.journalSeq : 0),
  save(n) {
    if (past.heldSeq !== null) past.heldSeq = n;
    else if (past.history) past.history.putJournalSeq(n);
  },
};

function releaseSeq() {
  if (past.heldSeq && past.history) past.history.putJournalSeq(past.heldSeq);
  past.heldSeq = null;
}

async function openHistory(deviceId) {
  if (past.history && past.device === deviceId) return;
  if (past.history) past.history.close();
  past.device = deviceId;
  past.noOlder = past.gatewayDone = false;
  past.journalBefore = null;
  const generation = ++past.generation;
  const opened = await History.open(deviceId);
  if (generation !== past.generation) {
    // Forgotten (or another device) while it opened: not this page's history any more.
    if (opened) opened.close();
    return;
  }
  past.history = opened;
  past.lastKey = Math.max(past.lastKey, opened.lastSeq);
  past.journal = opened.journalSeq > 0;
  await loadOlder(PAGE_FIRST);
  if (generation === past.generation) await showOlderOpenCards();
}

// A card still open but older than the first window: at the end, where a card sent again
// goes (as a new device's fill does), so the person can still answer it. A gateway with a
// journal does not send it again (L58), and the agent waits for the answer.
async function showOlderOpenCards() {
  const first = ui.messages.firstElementChild;
  if (!past.journal || !past.history || !first) return;
  for (const r of await past.history.openCardsBefore(Number(first.dataset.seq))) {
    if (!r.card || r.card.expiresAt <= Date.now()) continue;
    const node = fromRecord(r);
    if (node) ui.messages.append(node);
  }
}

function forgetHistory(deviceId) {
  past.generation++;
  if (past.history) past.history.close();
  past.history = null;
  past.device = null;
  past.detached = false;
  past.fill = past.heldSeq = null;
  if (deviceId) History.forget(deviceId);
}

// Keeps element `n`'s item in history under `key`; the write happens a moment later.
function remember(n, key, record) {
  const r = { ...record, key, seq: Number(n.dataset.seq), at: past.records.get(n)?.at || Date.now() };
  if (n.dataset.jseq) r.jseq = Number(n.dataset.jseq);
  past.records.set(n, r);
  if (past.history) past.history.put(r);
}

function rememberPatch(n, patch) {
  const r = past.records.get(n);
  if (r) remember(n, r.key, Object.assign(r, patch));
}

// The element for a record, or null when it is already in the page (the live one wins).
function fromRecord(r) {
  if (r.type === 'card') {
    if (cards.has(r.id) || !r.card) return null;
    const c = { el: cardElement(r.card), card: r.card };
    cards.set(r.id, c);
    const done = r.state === 'open' && closedAway.get(r.id);
    if (done) {
      closedAway.delete(r.id);
      stamp(c.el, r);
      closeDone(c, done); // and the record too
      return c.el;
    }
    if (r.state === 'open' && past.journal && r.card.expiresAt > Date.now()) {
      // A gateway with a journal does not send a card again that this page has seen (L58):
      // it stays open here, and answer() knows it.
      if (client && !client.prompts.has(r.id)) client.prompts.set(r.id, r.card);
      tickCard(c);
    } else {
      // Still open when it was stored: closed now, until the gateway sends it open again.
      closeCard(c, r.state === 'open' ? 'closed' : r.state, r.state === 'open' ? 'closed' : r.result || r.state, r.optionId || null);
    }
    return stamp(c.el, r);
  }
  if (bubbles.has(r.key)) return null;
  const m = newBubble(r.from, r.id || r.key, r.key, r.seq, r.at ? new Date(r.at) : null);
  if (r.type === 'media') showMedia(m, r.media, r.from === 'agent');
  else if (r.from === 'agent') setBody(m, markdownText(r.text));
  else setBody(m, el('div', 'msg-text', r.text));
  m.dataset.final = String(r.final !== false || r.from === 'user');
  if (r.from === 'user' && !r.final) {
    // Not confirmed before the page went away: it was not sent, and nothing re-sends it.
    m.classList.add('failed');
    m.querySelector('.msg-meta').textContent = `${r.at ? fmtTime(new Date(r.at)) + ' · ' : ''}${r.failed || 'not sent'}`;
  }
  return stamp(m, r);
}

function stamp(n, r) {
  n.dataset.seq = String(r.seq);
  setJseq(n, r.jseq);
  past.restored.add(n);
  past.records.set(n, r);
  return n;
}

function markdownText(text) {
  const t = el('div', 'msg-text');
  renderMarkdown(t, text);
  return t;
}

// Puts up to `n` items older than the window's first one above it, the view kept still:
// from this device's cache, and past its end from the gateway's journal.
async function loadOlder(n = PAGE) {
  if (!past.history || past.loading || (past.noOlder && past.gatewayDone)) return;
  past.loading = true;
  try {
    let nodes = [];
    if (!past.noOlder && past.history.enabled) {
      const first = ui.messages.firstElementChild;
      const records = await past.history.page(first ? Number(first.dataset.seq) : null, n);
      if (records.length < n) past.noOlder = true;
      nodes = records.map(fromRecord).filter(Boolean);
    } else {
      past.noOlder = true;
    }
    if (!nodes.length) nodes = await olderFromJournal(n);
    if (!nodes.length) return;
    const box = ui.messages;
    const fromBottom = box.scrollHeight - box.scrollTop;
    const wasEmpty = !box.firstElementChild;
    for (const node of nodes.reverse()) place(node);
    dropNewest(box.childElementCount - MAX_ITEMS);
    box.scrollTop = wasEmpty ? box.scrollHeight : box.scrollHeight - fromBottom;
  } finally {
    past.loading = false;
  }
}

// A `history` page of the entries before the oldest journal entry in the window, without
// what is shown or cached already; each is cached too.
async function olderFromJournal(n) {
  const c = client;
  if (past.gatewayDone || !c || !c.online || !c.hasHistory) return [];
  const seqs = [...ui.messages.children].map((e) => Number(e.dataset.jseq)).filter((s) => s > 0);
  if (!seqs.length && ui.messages.firstElementChild) return []; // nothing of the journal to go on from
  // Below the page's items and below the last page read, even when nothing of that page
  // could be shown (a newer gateway's entries): scrolling back never asks for it again.
  const before = Math.min(...seqs, past.journalBefore ?? Infinity);
  let page;
  try {
    page = await c.history(Number.isFinite(before) ? before : null, n);
  } catch {
    return []; // offline or refused: the next scroll tries again
  }
  if (client !== c) return [];
  if (!page.more) past.gatewayDone = true;
  const read = page.items.map((i) => i.seq).filter((s) => Number.isInteger(s) && s > 0);
  if (read.length) past.journalBefore = Math.min(before, ...read);
  return newRecords(page.items).then((records) => records.map((r) => {
    past.history?.put(r);
    return fromRecord(r);
  }).filter(Boolean));
}

// `history` items as records, without those already in the page or the cache.
async function newRecords(items, blobs = new Map()) {
  const records = items.map((i) => recordOfItem(i, blobs)).filter(Boolean);
  const cached = past.history ? await past.history.has(records.map((r) => r.key)) : new Set();
  return records.filter((r) => !cached.has(r.key) && !bubbles.has(r.key) && !(r.type === 'card' && cards.has(r.id)));
}

// Shows `history` items where their keys put them (a new device's first page, a catch-up).
async function showItems(items, blobs, stick) {
  for (const i of items) if (i.from === 'user') wasSent(i);
  const records = await newRecords(items, blobs);
  keepBottom(stick, () => {
    for (const r of records) {
      const n = fromRecord(r);
      if (!n) continue;
      past.history?.put(r);
      past.lastKey = Math.max(past.lastKey, r.seq);
      place(n);
    }
    trimMessages();
  });
}

// The person's own message shown as not sent (the page went away before its `received`),
// which the journal has after all: it was sent.
function wasSent(item) {
  const m = bubbles.get(item.id);
  if (!m || !m.classList.contains('failed')) return;
  m.classList.remove('failed');
  const at = past.records.get(m)?.at;
  m.querySelector('.msg-meta').textContent = at ? fmtTime(new Date(at)) : '';
  markBubble(item.id, 'final', null, item.seq);
}

// ---- the journal's replay (L58) ----------------------------------------------------------

// `ready` from a gateway with a journal: a device with nothing shown fills its view from
// `history` once the replay is over (the replay leaves out the person's own messages, and
// may hold thousands of entries); meanwhile the replay's items wait in past.fill.
function onJournalReady({ detail: d }) {
  past.journal = d.seq !== null;
  if (!past.journal) {
    // An older gateway, or one whose journal could not be opened: it sends open cards
    // again (H5), so the ones shown open from the cache are closed until it does.
    for (const c of cards.values()) {
      if (past.restored.has(c.el) && c.el.dataset.state === 'open') closeCard(c, 'closed', 'closed', null);
    }
    return;
  }
  if (!client.hasHistory) return;
  if (past.heldSeq === null) past.heldSeq = 0;
  // A fill cut short by a lost connection goes on with the next replay.
  if (!past.fill && d.resumeAfter === 0 && !ui.messages.firstElementChild) past.fill = { events: [] };
}

// True when the item is part of a replay that a new device's fill replaces.
function heldForFill(type, detail) {
  if (!past.fill || !client || !client.replaying) return false;
  past.fill.events.push([type, detail]);
  return true;
}

async function onResumed({ detail: { seq, after } }) {
  const c = client;
  try {
    if (past.fill) await fillFromJournal(c);
    else if (c.hasHistory && seq > after) await catchUp(c, after, seq);
  } finally {
    if (client === c) releaseSeq();
  }
}

// What the replay sent while a fill waited, if the fill fails: shown as it came.
const REPLAYED = { message: onAgentMessage, media: onMedia, prompt: onPrompt, promptdone: onPromptDone };

async function fillFromJournal(c) {
  const events = past.fill.events;
  let page = null;
  try {
    page = await c.history(null, PAGE_FIRST);
  } catch { /* shown from the replay instead */ }
  if (client !== c) return;
  past.fill = null;
  if (!page) {
    for (const [type, detail] of events) REPLAYED[type]({ detail });
    return;
  }
  const blobs = new Map(events.filter(([t, d]) => t === 'media' && d.blob).map(([, d]) => [d.id, d.blob]));
  await showItems(page.items, blobs, true);
  past.noOlder = true; // the cache holds this page and nothing older
  past.gatewayDone = !page.more;
  // A card still open but older than the page: at the end, where a card sent again goes.
  for (const [type, d] of events) {
    if (type === 'prompt' && d.card.state === 'open' && !cards.has(d.card.id)) onPrompt({ detail: { ...d, seq: null } });
  }
  // How cards closed while away (one answered from its notification, L65), the page's
  // cards included: a closing already shown changes nothing, one not shown is remembered.
  for (const [type, d] of events) {
    if (type === 'promptdone') onPromptDone({ detail: d });
  }
}

// After a resume: what the journal has after `after` that the replay does not carry (the
// person's own messages) or that this page lost (a reload before its cache was written).
// `latest - after` bounds how many entries changed.
async function catchUp(c, after, latest) {
  const items = [];
  let before = null;
  for (let pages = 0; pages < 5; pages++) {
    let page;
    try {
      page = await c.history(before, Math.min(200, latest - after));
    } catch {
      return;
    }
    const newer = page.items.filter((i) => i.seq > after);
    items.unshift(...newer);
    if (!page.more || !newer.length || newer.length < page.items.length) break;
    before = page.items[0].seq;
  }
  if (client === c && items.length) await showItems(items, new Map(), false);
}

// Past the cap after loading older items: the newest go (they are in history).
function dropNewest(extra) {
  for (let n = ui.messages.lastElementChild; n && extra > 0;) {
    const prev = n.previousElementSibling;
    if (!isOpenCard(n)) {
      dropItem(n);
      extra--;
      past.detached = true;
    }
    n = prev;
  }
}

// The window is away from the end and the user scrolled down: the next newer items.
async function loadNewer() {
  if (!past.history || past.loading || !past.detached) return;
  past.loading = true;
  try {
    const last = [...ui.messages.children].filter((n) => !isOpenCard(n)).at(-1);
    const records = await past.history.pageAfter(last ? Number(last.dataset.seq) : 0, PAGE);
    if (records.length < PAGE) past.detached = false;
    const nodes = records.map(fromRecord).filter(Boolean);
    if (last) last.after(...nodes);
    else ui.messages.append(...nodes);
    trimMessages();
  } finally {
    past.loading = false;
  }
}

// Something live while the window shows older items: back to the end first, then the
// items before it load as the user scrolls up.
function attachLive() {
  if (!past.detached) return;
  past.detached = false;
  past.noOlder = false;
  for (const n of [...ui.messages.children]) if (!isOpenCard(n)) dropItem(n);
  setTimeout(() => loadOlder(PAGE), 0);
}

ui.messages.addEventListener('scroll', () => {
  const m = ui.messages;
  if (m.scrollTop < 200) loadOlder();
  else if (past.detached && m.scrollHeight - m.scrollTop - m.clientHeight < 200) loadNewer();
}, { passive: true });

function addUserText(id, text) {
  keepBottom(true, () => {
    const m = bubble('user', id);
    setBody(m, el('div', 'msg-text', text)); // the user's own words: plain text, no Markdown
    remember(m, id, { from: 'user', type: 'text', id, text, final: false });
  });
}

// A live message whose id a finished message shown from history already has, with other
// text, is a new message (an agent that reuses ids after a restart): its own bubble and
// record, under this page's alias of its key, rather than rewriting the old one.
const liveAliases = new Map();

function liveKey(d) {
  const key = 'm:' + d.key;
  if (liveAliases.has(key)) return liveAliases.get(key);
  const m = bubbles.get(key);
  if (!m || !past.restored.has(m) || m.dataset.final !== 'true' || past.records.get(m)?.text === d.text) return key;
  const alias = `${key}#${orderKey(null)}`;
  liveAliases.set(key, alias);
  return alias;
}

function onAgentMessage({ detail: d }) {
  if (heldForFill('message', d)) return;
  keepBottom(false, () => {
    const key = liveKey(d);
    const m = bubbles.get(key) || bubble('agent', d.id, key, d.seq);
    setJseq(m, d.seq);
    let t = m.querySelector('.msg-text');
    if (!t) {
      t = el('div', 'msg-text');
      setBody(m, t);
    }
    renderMarkdown(t, d.text); // M2: the latest version replaces the bubble's text in place
    m.dataset.final = String(d.final);
    m.setAttribute('aria-busy', String(!d.final));
    // Every whole version is kept, not only the final one: protocol.js keeps its seq, so a
    // page reloaded while the agent works must find the reply as far as it got (L58 sends
    // it again only once it changes).
    if (d.complete) remember(m, key, { from: 'agent', type: 'text', id: d.id, text: d.text, final: d.final });
  });
  if (d.final) client.ack(d.id);
}

// Only these types are given to the page as they are; anything else is a download
// (application/octet-stream), so a blob: URL can never become an HTML or SVG document.
const SAFE_IMAGE = /^image\/(png|jpeg|gif|webp|avif|bmp)$/;

function onMediaProgress({ detail: d }) {
  if (d.parts < 2 || (past.fill && client.replaying)) return;
  keepBottom(false, () => {
    const m = mediaBubble(d.id, d.seq);
    let p = m.querySelector('.media-pending');
    if (!p) {
      p = el('div', 'media-pending');
      setBody(m, p);
    }
    p.textContent = `Receiving ${d.filename || 'a file'}… ${Math.floor((100 * d.got) / d.parts)} %`;
  });
}

function onMedia({ detail: d }) {
  if (heldForFill('media', d)) return;
  keepBottom(false, () => {
    const m = mediaBubble(d.id, d.seq);
    setJseq(m, d.seq);
    showMedia(m, d, true);
    remember(m, 'f:' + d.id, mediaRecord('agent', d.id, d));
  });
  client.ack(d.id);
}

// The body of media bubble `m`. `markdown`: the caption is the agent's, so Markdown.
function showMedia(m, d, markdown) {
  const mime = (d.mime || '').toLowerCase().split(';')[0].trim();
  const name = safeName(d.filename || d.kind);
  const nodes = [];
  if (d.url && /^\/[^/\\]/.test(d.url)) {
    nodes.push(gatewayFile(d, name, m));
  } else if (d.url) {
    let href = null;
    try {
      const u = new URL(d.url);
      if (['http:', 'https:'].includes(u.protocol) && !pairsThisPage(u)) href = d.url;
    } catch { href = null; }
    const a = el(href ? 'a' : 'span', 'media-url');
    a.append(icon('link'), el('span', null, d.filename || d.url));
    if (href) Object.assign(a, { href, target: '_blank', rel: 'noopener noreferrer' });
    nodes.push(a);
  } else if (!d.blob) {
    // From the journal, whose `history` carries no bytes: what the file was.
    const f = el('span', 'media-download media-gone');
    f.title = 'The file itself is not on this device';
    f.append(icon(d.kind === 'voice' ? 'mic' : 'file'), el('span', 'media-name', name), el('span', 'media-size', d.size ? fmtSize(d.size) : ''));
    nodes.push(f);
  } else if ((d.kind === 'image' || d.kind === 'animation') && SAFE_IMAGE.test(mime)) {
    const img = el('img', 'media-image');
    img.alt = name;
    img.src = blobUrl(new Blob([d.blob], { type: mime }), m);
    img.addEventListener('load', () => keepBottom(false, () => img.classList.toggle('tiny', img.naturalWidth < 64 && img.naturalHeight < 64)), { once: true });
    // Not decodable after all: the same URL (a raster type, never a document) as a download.
    img.addEventListener('error', () => img.replaceWith(downloadLink(d, name, m, img.src)), { once: true });
    nodes.push(img);
  } else if (['voice', 'video', 'animation', 'document'].includes(d.kind) && /^(audio|video)\//.test(mime)) {
    const video = mime.startsWith('video/');
    const media = el(video ? 'video' : 'audio', video ? 'media-video' : 'media-audio');
    media.controls = true;
    media.preload = 'metadata';
    if (video) media.playsInline = true;
    media.src = blobUrl(new Blob([d.blob], { type: mime }), m);
    nodes.push(media);
    // A document that is audio or video plays inline and can still be saved as a file.
    if (d.kind === 'document') nodes.push(downloadLink(d, name, m, media.src));
  } else {
    nodes.push(downloadLink(d, name, m));
  }
  if (d.caption) {
    const t = el('div', 'msg-text');
    if (markdown) renderMarkdown(t, d.caption);
    else t.textContent = d.caption;
    nodes.push(t);
  }
  setBody(m, ...nodes);
  m.classList.add('has-media');
  m.dataset.final = 'true';
}

// Files of the gateway's fetched at once: it answers at most four at a time (L63), and a
// page of history may name dozens of images.
const GATEWAY_FETCHES = 2;
let gatewayFetching = 0;
const gatewayWaiting = [];

// `url` (a path on this gateway) fetched with the token; the bytes as a Blob.
async function fetchGatewayFile(url) {
  if (gatewayFetching >= GATEWAY_FETCHES) await new Promise((go) => gatewayWaiting.push(go));
  gatewayFetching++;
  try {
    const r = await fetch(url, { headers: { Authorization: `Bearer ${client.opts.token}` }, cache: 'no-store' });
    if (!r.ok) throw new Error(`the gateway answered ${r.status}`);
    return await r.blob();
  } finally {
    gatewayFetching--;
    gatewayWaiting.shift()?.();
  }
}

// A file the gateway keeps for this device (a journal item's `url`, a path on the gateway):
// a raster image is fetched with the token and shown; anything else is fetched when its
// link is clicked, then saved like any download.
function gatewayFile(d, name, owner) {
  const mime = (d.mime || '').toLowerCase().split(';')[0].trim();
  if ((d.kind === 'image' || d.kind === 'animation') && SAFE_IMAGE.test(mime)) {
    const img = el('img', 'media-image');
    img.alt = name;
    fetchGatewayFile(d.url).then(
      (blob) => {
        if (!owner.isConnected) return; // its bubble was dropped meanwhile: no URL to leak
        keepBottom(false, () => (img.src = blobUrl(new Blob([blob], { type: mime }), owner)));
      },
      () => img.replaceWith(gatewayLink(d, name, owner)),
    );
    return img;
  }
  return gatewayLink(d, name, owner);
}

function gatewayLink(d, name, owner) {
  const a = el('a', 'media-download');
  a.href = '#';
  a.append(icon('file'), el('span', 'media-name', name), el('span', 'media-size', d.size ? fmtSize(d.size) : ''));
  a.addEventListener('click', async (e) => {
    if (a.download) return; // fetched: the link is the file now
    e.preventDefault();
    try {
      a.href = blobUrl(new Blob([await fetchGatewayFile(d.url)], { type: 'application/octet-stream' }), owner);
      a.download = name;
      a.click();
    } catch (err) {
      notice(`“${name}” could not be fetched: ${err.message}`);
    }
  });
  return a;
}

// `href`: a blob: URL of this bubble to reuse; otherwise a new application/octet-stream one.
function downloadLink(d, name, owner, href) {
  const a = el('a', 'media-download');
  a.href = href || blobUrl(new Blob([d.blob], { type: 'application/octet-stream' }), owner);
  a.download = name;
  a.append(icon('file'), el('span', 'media-name', name), el('span', 'media-size', fmtSize(d.size)));
  return a;
}

function safeName(s) {
  // eslint-disable-next-line no-control-regex
  const n = String(s).replace(/[\u0000-\u001f\u007f/\\]+/g, '_').replace(/^\.+/, '').slice(0, 200);
  return n || 'file';
}

// ---- cards ---------------------------------------------------------------------------------

const CARD_TITLES = { exec_approval: 'Approve command', slash_confirm: 'Confirm', clarify: 'Question' };

// Hidden characters on a card (bidi controls, zero-width characters: issue 23) are shown as
// ⟨U+202E⟩ markers, each in a span.hidden-char, so the person reads the text the agent will
// use and not the way it would display. Text nodes only, as everywhere.
function revealInto(target, text) {
  const parts = splitHiddenChars(text).map((part, i) => (i % 2 ? el('span', 'hidden-char', part) : part));
  target.replaceChildren(...parts.filter((p) => p !== '')); // no empty text node: .card-command:empty
  return target;
}

const revealed = (tag, cls, text) => revealInto(el(tag, cls), text);

// validateCard sets hiddenChars (the gateway's flag, or its own check); a card that an older
// page stored in the history has no such field.
function hidesChars(card) {
  return card.hiddenChars || [card.text, card.command, card.description, ...card.options.map((o) => o.label)].some(hasHiddenChars);
}

function hiddenWarning(card) {
  const check = card.kind === 'exec_approval' ? 'Check the command before you approve.' : 'Check it before you answer.';
  return el('p', 'card-warning', `This card contains hidden characters, shown as ⟨U+…⟩. ${check}`);
}

function onPrompt({ detail: d }) {
  if (heldForFill('prompt', d)) return;
  const { card, repeat, seq } = d;
  closedAway.delete(card.id); // open again (H5), or an id used again: what came before is past
  const known = cards.get(card.id);
  if (known && repeat && known.el.dataset.state === 'open') {
    known.card = card;
    return;
  }
  // Another card under an id still shown open: the old element's buttons would answer the
  // new card, so it is closed first.
  if (known && !repeat && known.el.dataset.state === 'open' && !past.restored.has(known.el)) {
    closeCard(known, 'expired', 'expired', null);
  }
  keepBottom(false, () => {
    // Shown from history (as closed, or open from the journal's cache): the live card takes its place.
    const old = known && past.restored.has(known.el) ? known.el : null;
    if (!old) attachLive();
    const c = cardElement(card);
    c.dataset.seq = old ? old.dataset.seq : String(orderKey(seq));
    setJseq(c, seq);
    if (old) old.replaceWith(c);
    else place(c);
    cards.set(card.id, { el: c, card });
    remember(c, 'c:' + card.id, { type: 'card', id: card.id, card, state: 'open' });
    tickCard(cards.get(card.id));
    trimMessages();
  });
}

// A card's element with its buttons wired to the live connection.
function cardElement(card) {
  const c = el('div', 'card');
  c.dataset.promptId = card.id;
  c.dataset.kind = card.kind;
  c.dataset.state = 'open';
  c.setAttribute('role', 'group');
  c.setAttribute('aria-label', CARD_TITLES[card.kind]);
  c.append(el('div', 'card-head', CARD_TITLES[card.kind]));
  if (hidesChars(card)) c.append(hiddenWarning(card));
  if (card.text) c.append(revealed('p', 'card-text', card.text));
  if (card.kind === 'exec_approval' || card.command) c.append(revealed('pre', 'card-command', card.command));
  if (card.description) c.append(revealed('p', 'card-description', card.description));
  const opts = el('div', 'card-options');
  for (const o of card.options) {
    const b = revealed('button', 'card-option' + (o.style ? ' ' + o.style : ''), o.label);
    b.type = 'button';
    b.dataset.optionId = o.id;
    b.addEventListener('click', () => choose(card.id, o.id, b));
    opts.append(b);
  }
  c.append(opts);
  const other = el('div', 'card-other');
  other.hidden = true;
  const input = el('textarea', 'card-other-input');
  input.rows = 2;
  input.placeholder = 'Your answer';
  input.setAttribute('aria-label', 'Your answer');
  const send = el('button', 'card-other-send', 'Send');
  send.type = 'button';
  send.addEventListener('click', () => answerOther(card.id));
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      answerOther(card.id);
    }
  });
  other.append(input, send);
  c.append(other);
  const foot = el('div', 'card-foot');
  foot.append(el('span', 'card-countdown'), el('span', 'card-result'));
  c.append(foot);
  return c;
}

function setCardBusy(c, busy, chosen) {
  for (const b of c.el.querySelectorAll('button')) {
    b.disabled = busy;
    if (b.classList.contains('card-option')) b.setAttribute('aria-pressed', String(b.dataset.optionId === chosen));
  }
  c.el.querySelector('.card-other-input').disabled = busy;
}

function choose(promptId, optionId) {
  const c = cards.get(promptId);
  if (!c || c.el.dataset.state !== 'open') return;
  if (optionId === 'other' && c.card.kind === 'clarify') {
    const other = c.el.querySelector('.card-other');
    other.hidden = false;
    other.querySelector('.card-other-input').focus();
    return;
  }
  try {
    client.answer(promptId, optionId);
    setCardBusy(c, true, optionId);
    c.el.querySelector('.card-result').textContent = 'Sending…';
  } catch (e) {
    notice(errorText(e));
  }
}

function answerOther(promptId) {
  const c = cards.get(promptId);
  if (!c || c.el.dataset.state !== 'open') return;
  const input = c.el.querySelector('.card-other-input');
  const text = input.value.trim();
  if (!text) {
    input.focus();
    return;
  }
  try {
    client.answer(promptId, 'other', text);
    setCardBusy(c, true, 'other');
    c.el.querySelector('.card-result').textContent = 'Sending…';
  } catch (e) {
    notice(errorText(e));
  }
}

function onPromptDone({ detail: d }) {
  if (heldForFill('promptdone', d)) return;
  const c = cards.get(d.id);
  if (!c) {
    // A card closed while this page was away (answered from its notification, L65) may be
    // told before the page's history shows it (a slow start, or older than the window):
    // kept for fromRecord, so that the card is not shown open later.
    closedAway.set(d.id, d);
    if (closedAway.size > 200) closedAway.delete(closedAway.keys().next().value);
    return;
  }
  closeDone(c, d);
}

function closeDone(c, d) {
  setJseq(c.el, d.seq);
  // P5: an expired card may name its safe default; it is shown as "expired" all the same.
  const other = c.card.answer && c.card.answer.optionId === 'other' ? c.card.answer.text : null;
  // The label from the card shown: the client knows only the cards of this page's
  // connections (not one from history closed as "closed"), and then gives the option's id.
  const option = d.optionId && c.card.options.find((o) => o.id === d.optionId);
  const label = option ? option.label : d.label || d.optionId;
  const result = d.expired ? 'expired' : other && d.optionId === 'other' ? `Other: ${other}` : label || 'done';
  closeCard(c, d.expired ? 'expired' : 'done', result, d.expired ? null : d.optionId);
  rememberPatch(c.el, { state: c.el.dataset.state, result, optionId: d.optionId });
}

// `state`: done, expired, or closed (from history, with no answer known to this page).
function closeCard(c, state, result, chosen) {
  c.el.dataset.state = state;
  setCardBusy(c, true, chosen);
  revealInto(c.el.querySelector('.card-result'), result);
  c.el.querySelector('.card-countdown').textContent = '';
}

function tickCard(c) {
  if (c.el.dataset.state !== 'open') return;
  const s = Math.max(0, Math.ceil((c.card.expiresAt - Date.now()) / 1000));
  const text = s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}` : `${s} s`;
  const cd = c.el.querySelector('.card-countdown');
  if (cd.textContent !== text) cd.textContent = text;
  cd.dataset.seconds = String(s);
}

// ---- status, typing, avatar ------------------------------------------------------------------

function renderStatus() {
  const s = status;
  let text = 'Not paired';
  let state = 'offline';
  if (client) {
    state = s.state === 'closed' || s.state === 'idle' ? 'offline' : s.state;
    if (s.state === 'connecting') text = 'Connecting…';
    else if (s.state === 'online') text = 'Online';
    else if (s.state === 'noaccess') text = 'No access — check the token';
    else if (s.reason === 'replaced') text = 'Offline — open in another tab';
    else if (s.retryAt) text = `Offline — retrying in ${Math.max(0, Math.ceil((s.retryAt - Date.now()) / 1000))} s`;
    else text = 'Offline';
  }
  if (ui.status.dataset.state !== state) {
    ui.status.dataset.state = state;
    // Announced once per change; the countdown in #status is not read out every second.
    $('sr-status').textContent = state === 'offline' ? 'Offline' : text;
  }
  if (ui.status.textContent !== text) ui.status.textContent = text;
  ui.retry.hidden = !(client && state === 'offline');
}

function onStatus({ detail }) {
  status = detail;
  renderStatus();
  if (detail.state !== 'online') {
    // Offline, the turn's states are stale: the avatar goes back to idle.
    showTyping(false);
    avatarQueue.length = 0;
    queueAvatar('idle');
  }
  if (detail.state === 'noaccess') {
    pairMessage(noAccessText(detail));
    showScreen('pair');
  }
  if (detail.state === 'online') {
    pairMessage('');
    if (ui.notice.dataset.kind === 'fatal') ui.notice.textContent = ''; // it is over
  }
}

// L52: after failed attempts the gateway refuses an address for a while; say so, or the
// owner would paste a token that is right. Otherwise the token is refused for good: a wrong
// one, or this device's after it was revoked (issue 26), whose gateway's words it shows.
function noAccessText(d) {
  if (/^too many failed attempts/.test(d.message || '')) {
    return `The gateway is refusing this address for now after failed attempts (${d.message}). Wait, then press Pair again.`;
  }
  const said = d.message ? `${d.message}, ${d.code}` : d.code;
  return `This browser has no access (the gateway said: ${said}). Pair it again: run hermes-mobile pair and open its link, or paste the current token.`;
}

function showTyping(on) {
  ui.typing.hidden = !on;
}

// The avatar's states are shown for at least a moment each, so a quick thinking → speaking
// is still visible (and announced to the avatar page) in order.
const avatarQueue = [];
let avatarShownAt = 0;
let avatarTimer = null;
let avatarCurrent = 'idle';

function queueAvatar(state) {
  const last = avatarQueue.length ? avatarQueue.at(-1) : avatarCurrent;
  if (state !== last) avatarQueue.push(state);
  pumpAvatar();
}

function pumpAvatar() {
  if (avatarTimer || !avatarQueue.length) return;
  const wait = avatarShownAt + 350 - Date.now();
  if (wait > 0) {
    avatarTimer = setTimeout(() => {
      avatarTimer = null;
      pumpAvatar();
    }, wait);
    return;
  }
  setAvatar(avatarQueue.shift());
  pumpAvatar();
}

function setAvatar(state) {
  avatarCurrent = state;
  avatarShownAt = Date.now();
  ui.avatarState.dataset.state = state;
  ui.avatarState.textContent = state === 'thinking' ? 'thinking…' : state;
  postAvatar();
}

function postAvatar() {
  try {
    ui.avatarFrame.contentWindow?.postMessage({ avatar: avatarCurrent }, location.origin);
  } catch { /* the frame is not loaded yet; its load handler posts again */ }
}
ui.avatarFrame.addEventListener('load', postAvatar);

// ---- composer --------------------------------------------------------------------------------

function maxChars() {
  return client ? client.maxTextChars : MAX_TEXT_CHARS;
}

function updateComposer() {
  const text = ui.composer.value.trim();
  const n = charCount(text); // G1: code points, as the gateway counts
  ui.send.disabled = n === 0 || n > maxChars();
  const near = n > maxChars() - 1000;
  ui.counter.hidden = !near;
  if (near) {
    ui.counter.textContent = `${n} / ${maxChars()}`;
    ui.counter.classList.toggle('over', n > maxChars());
  }
  ui.composer.style.height = 'auto';
  ui.composer.style.height = Math.min(ui.composer.scrollHeight, 180) + 'px';
}

function sendComposer() {
  const text = ui.composer.value.trim();
  if (!client || ui.send.disabled || !text) return;
  try {
    const id = client.sendText(text);
    addUserText(id, text);
    ui.composer.value = '';
    updateComposer();
  } catch (e) {
    notice(errorText(e));
  }
}

ui.composer.addEventListener('input', () => {
  updateComposer();
  if (client && ui.composer.value.trim()) client.typing(); // at most every 2 s (protocol.js)
});
ui.composer.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
    e.preventDefault();
    sendComposer();
  }
});
ui.send.addEventListener('click', () => {
  sendComposer();
  ui.composer.focus();
});

// ---- uploads ----------------------------------------------------------------------------------

function uploadFiles(files) {
  if (!client) return;
  for (const f of files) {
    const name = f.name || 'pasted file';
    if (f.size > client.maxMediaBytes) {
      notice(`“${name}” is too big (${fmtSize(f.size)}): files up to ${fmtSize(client.maxMediaBytes)} can be sent. Nothing was sent.`);
      continue;
    }
    if (f.size === 0) {
      notice(`“${name}” is empty. Nothing was sent.`);
      continue;
    }
    const caption = ui.caption.value.trim();
    const id = newId('f');
    const m = keepBottom(true, () => bubble('user', id));
    const up = el('div', 'upload');
    up.dataset.name = name;
    up.dataset.state = 'sending';
    const progress = el('progress');
    progress.max = 100;
    progress.value = 0;
    up.append(icon('file'), el('span', 'upload-name', name), el('span', 'upload-size', fmtSize(f.size)), progress);
    const nodes = [up];
    if (SAFE_IMAGE.test(f.type)) {
      const img = el('img', 'upload-preview');
      img.alt = '';
      img.src = blobUrl(f, m);
      nodes.unshift(img);
    }
    if (caption) nodes.push(el('div', 'msg-text', caption));
    setBody(m, ...nodes);
    remember(m, id, mediaRecord('user', id, { kind: kindFromMime(f.type), mime: f.type, filename: name, caption, size: f.size, blob: f }));
    ui.messages.scrollTop = ui.messages.scrollHeight;
    try {
      client.sendFile(f, {
        id,
        filename: name,
        caption,
        onProgress: (p) => {
          progress.value = p.percent;
        },
      });
      ui.caption.value = ''; // the caption goes with one file
    } catch (e) {
      markBubble(id, 'failed', 'not sent');
      notice(errorText(e));
    }
  }
}

ui.attach.addEventListener('click', () => ui.fileInput.click());
ui.fileInput.addEventListener('change', () => {
  uploadFiles([...ui.fileInput.files]);
  ui.fileInput.value = '';
});

let dragDepth = 0;
const hasFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes('Files');
document.addEventListener('dragenter', (e) => {
  if (!client || !hasFiles(e)) return;
  dragDepth++;
  ui.drop.hidden = false;
});
document.addEventListener('dragleave', () => {
  if (--dragDepth <= 0) {
    dragDepth = 0;
    ui.drop.hidden = true;
  }
});
document.addEventListener('dragover', (e) => {
  if (client && hasFiles(e)) e.preventDefault();
});
document.addEventListener('drop', (e) => {
  dragDepth = 0;
  ui.drop.hidden = true;
  if (!client || !hasFiles(e)) return;
  e.preventDefault();
  uploadFiles([...e.dataTransfer.files]);
});
document.addEventListener('paste', (e) => {
  const files = e.clipboardData ? [...e.clipboardData.files] : [];
  if (!client || !files.length) return;
  e.preventDefault();
  uploadFiles(files);
});

// ---- voice (voice.js records; the page shows and sends) --------------------------------------

const voice = initVoice({ ui, notice, onRecorded: sendVoice });

function sendVoice(wav, secs) {
  const id = newId('a');
  keepBottom(true, () => {
    const m = bubble('user', id);
    const audio = el('audio', 'own-audio');
    audio.controls = true;
    audio.src = blobUrl(wav, m);
    const label = el('div', 'voice-label');
    label.append(icon('mic'), `Voice message · ${Math.floor(secs / 60)}:${String(secs % 60).padStart(2, '0')}`);
    setBody(m, label, audio);
    remember(m, id, mediaRecord('user', id, { kind: 'voice', mime: 'audio/wav', filename: 'voice.wav', caption: '', size: wav.size, blob: wav }));
  });
  try {
    client.sendAudio(wav, { format: 'wav', id });
  } catch (e) {
    markBubble(id, 'failed', 'not sent');
    notice(errorText(e));
  }
}

ui.mic.addEventListener('click', () => {
  if (client) voice.toggle();
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape') voice.cancel();
});

// ---- errors -------------------------------------------------------------------------------------

function errorText(e) {
  if (e instanceof HermesError) {
    if (e.code === 'too_big') return `Too big: ${e.message}.`;
    return `${e.code}: ${e.message}`;
  }
  return String(e && e.message ? e.message : e);
}

function onError({ detail: d }) {
  if (d.request) return; // the answer to a request (push_*): its caller shows it
  notice(`Error from the gateway: ${d.code}${d.message ? ' — ' + d.message : ''}`, d.fatal ? 'fatal' : 'error');
  const c = d.promptId && cards.get(d.promptId);
  if (c && c.el.dataset.state === 'open') {
    setCardBusy(c, false, null);
    c.el.querySelector('.card-result').textContent = '';
  }
}

// ---- devices (issue 26, devices.js): the paired devices, for an owner ----------------------------

const devices = initDevices({
  getClient: () => client,
  ownDeviceId: () => (client ? client.deviceId : store.get(KEY_DEVICE)),
  el,
  revealInto,
  errorText,
});

// ---- pairing and the client's life ---------------------------------------------------------------

function showScreen(which) {
  const chat = which === 'chat';
  ui.pair.hidden = chat;
  ui.chat.hidden = !chat;
  ui.bar.hidden = !chat;
  ui.forget.hidden = !store.get(KEY_TOKEN) && !client;
  push.show(chat);
  devices.show(chat);
  if (!chat) setTimeout(() => ui.tokenInput.focus(), 0);
}

// The line above the pairing form: an error, or (kind 'info') what is going on; '' hides it.
function pairMessage(text, kind = 'error') {
  ui.pairError.textContent = text;
  ui.pairError.dataset.kind = kind;
  ui.pairError.hidden = !text;
}

function deviceName() {
  const ua = navigator.userAgent;
  const b = /Edg\//.test(ua) ? 'Edge' : /Firefox\//.test(ua) ? 'Firefox' : /Chrom(e|ium)\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : 'Browser';
  const os = /Android/.test(ua) ? 'Android' : /iPhone|iPad/.test(ua) ? 'iOS' : /Mac OS X/.test(ua) ? 'macOS' : /Windows/.test(ua) ? 'Windows' : /Linux/.test(ua) ? 'Linux' : '';
  return `${b}${os ? ' on ' + os : ''} (web)`;
}

function start(token) {
  stop();
  let deviceId = store.get(KEY_DEVICE);
  if (!deviceId) {
    deviceId = newDeviceId();
    store.set(KEY_DEVICE, deviceId);
  }
  client = new HermesClient({ token, deviceId, deviceName: deviceName(), appVersion: '1.0.0', seqStore });
  devices.reset(); // not an owner until this token's connection is asked (onReady)
  const on = (t, f) => client.addEventListener(t, f);
  on('status', onStatus);
  on('message', onAgentMessage);
  on('media', onMedia);
  on('mediaprogress', onMediaProgress);
  on('prompt', onPrompt);
  on('promptdone', onPromptDone);
  on('avatar', (e) => queueAvatar(e.detail.state));
  on('typing', (e) => showTyping(e.detail.active));
  on('error', onError);
  on('ready', (e) => {
    onJournalReady(e);
    push.onReady(client);
    devices.onReady(client);
  });
  on('resumed', onResumed);
  on('confirmed', (e) => markBubble(e.detail.id, 'final', null, e.detail.seq));
  on('rejected', (e) => markBubble(e.detail.id, 'failed', `refused (${e.detail.code})`));
  on('unsent', (e) => markBubble(e.detail.id, 'failed', 'not delivered'));
  showScreen('chat');
  const c = client;
  // History is shown before the socket is back (a reload, an offline start); a storage
  // that does not answer within a moment does not hold the connection up.
  Promise.race([openHistory(deviceId), new Promise((r) => setTimeout(r, 1500))]).then(() => {
    if (client === c) c.connect();
  });
  updateComposer();
}

function stop() {
  if (!client) return;
  const c = client;
  client = null;
  c.close();
}

function pair(input) {
  let token = (input || '').trim();
  let link;
  try {
    link = pastedLink(token);
  } catch {
    pairMessage('That link is not valid'); // a malformed %-escape
    ui.tokenInput.focus();
    return;
  }
  if (!link && PAIRING_CODE.test(token)) link = { code: token }; // a code pasted alone
  if (link && link.code) {
    ui.tokenInput.value = '';
    pairCode(link.code);
    return;
  }
  if (link) token = link.token;
  if (!token) {
    pairMessage('Paste the token first.');
    ui.tokenInput.focus();
    return;
  }
  store.set(KEY_TOKEN, token);
  ui.tokenInput.value = '';
  pairMessage('');
  start(token);
}

// A pairing code as `hermes-mobile pair` makes it (L73): 16 bytes, 22 base64url characters.
// Printed alone when the gateway serves no web page, so it gets pasted alone too. A token is
// never that: the app token has 43 characters, and one chosen by hand that looks like a
// code must be given as a `#token=` link.
const PAIRING_CODE = /^[A-Za-z0-9_-]{22}$/;

// A pasted pairing link: its code (`#pair=`, issue 26) or its token (`#token=`); null for a
// token or a code pasted alone. Throws on a malformed %-escape.
function pastedLink(text) {
  const code = /[#&]pair=([^&\s]+)/.exec(text);
  if (code) return { code: decodeURIComponent(code[1]).trim() };
  const token = /[#&]token=([^&\s]+)/.exec(text);
  return token ? { token: decodeURIComponent(token[1]) } : null;
}

// `#pair=…` (a pairing code, issue 26) or `#token=…`: taken out of the address bar at once,
// then used. replaceState also rewrites this session history entry (Back does not bring it
// back), but the URL as first opened may stay in the browser's global history, which
// "Forget this device" does not clear (a page cannot): a code there is spent or expired by
// then; a token is not.
function linkFromFragment() {
  const h = location.hash;
  if (!/^#(.*&)?(token|pair)=/.test(h)) return null;
  const p = new URLSearchParams(h.slice(1));
  history.replaceState(history.state, '', location.pathname + location.search);
  const code = (p.get('pair') || '').trim();
  const token = (p.get('token') || '').trim();
  return code ? { code } : token ? { token } : null;
}

// A link replaces the token in use only when the person says so (issue 23): a link in an
// agent's reply, or on any page, could otherwise log the owner out or move this browser to a
// token of someone else's choosing. With none in use (a first pairing, from the link or QR
// code of `hermes-mobile pair`) it pairs at once; so does a code while the token in use is
// refused (`noaccess`: a revoked device paired again), since there is nothing to lose.
let offered = null; // {token} or {code} of the link waiting for the person's answer
function linked(link) {
  const current = store.get(KEY_TOKEN) || (client && client.opts.token);
  if (link.code) {
    if (!current || (client && status.state === 'noaccess')) return pairCode(link.code);
  } else {
    if (!current) return pair(link.token);
    if (link.token === current) return;
  }
  offered = link;
  $('token-dialog-token').hidden = !!link.code;
  $('token-dialog-code').hidden = !link.code;
  if (!ui.tokenDialog.open) ui.tokenDialog.showModal();
}

// Decided in the click itself, not on the dialog's `close` event: that comes a task later,
// after a next link may already have offered another token.
function answerOffer(replace) {
  const link = offered;
  offered = null;
  if (ui.tokenDialog.open) ui.tokenDialog.close();
  if (!replace || !link) return;
  if (link.code) pairCode(link.code);
  else pair(link.token);
}
$('token-keep').addEventListener('click', () => answerOffer(false));
$('token-replace').addEventListener('click', () => answerOffer(true));
ui.tokenDialog.addEventListener('cancel', () => (offered = null)); // Esc keeps it too

// A pairing code (issue 26) is exchanged at once for a token of this device's own, which is
// kept as a pasted token is; the code itself is kept nowhere. The device id goes with it, so
// a browser paired before stays the same device (and keeps its history); one with none takes
// the id the gateway makes. A failure leaves the token in use, if any, as it was.
let pairing = false;
async function pairCode(code) {
  if (pairing) return;
  pairing = true;
  if (!client || !ui.pair.hidden) {
    showScreen('pair');
    pairMessage('Pairing this browser…', 'info');
  }
  ui.pairButton.disabled = true;
  // The gateway cuts this id's connection as it pairs it (L69): the page lets it go first,
  // rather than show "no access" for the moment before its new token, and takes it up
  // again if the pairing fails.
  const previous = client && client.opts.token;
  const chatting = ui.pair.hidden;
  stop();
  try {
    const device = { id: store.get(KEY_DEVICE) || '', name: deviceName(), platform: 'web' };
    const { token, deviceId } = await pairWithCode(location.origin, code, device);
    store.set(KEY_DEVICE, deviceId);
    store.set(KEY_TOKEN, token);
    pairMessage('');
    start(token);
  } catch (e) {
    if (previous && !client) start(previous);
    if (chatting) notice(pairFailure(e)); // the chat goes on with the token in use
    else pairMessage(pairFailure(e));
  } finally {
    pairing = false;
    ui.pairButton.disabled = false;
  }
}

function pairFailure(e) {
  switch (e && e.code) {
    case 'forbidden':
      return 'This pairing code is wrong, used or expired: run hermes-mobile pair again and open the new link.';
    case 'too_many_attempts':
      return `Too many pairing attempts from this address: try again in ${e.retryAfter} s.`;
    case 'full':
      return 'The gateway has as many paired devices as it keeps: revoke one you no longer use, then pair again.';
    case 'owner_device':
      return 'This browser is an owner device: pair it again with a code from hermes-mobile pair --owner.';
    case 'unavailable':
      return `This gateway cannot pair with a code (${e.message}): paste the token instead.`;
    case 'not_kept': // the code is spent, or (busy) may still pair later: either way, a new one
      return 'The gateway could not confirm the pairing (it could not save it, or it is busy): run hermes-mobile pair again and open the new link.';
    case 'network':
      return 'The gateway could not be reached: check the connection, then open the link again.';
    default:
      return `Pairing failed: ${errorText(e)}`;
  }
}

// "Forget this device", once confirmed: the gateway drops the device's journal, what it
// holds for it and its push subscriptions (L60); then this browser forgets the token, the
// device id and the cache.
async function forget() {
  voice.cancel();
  const c = client;
  push.forget(c); // before stop(): push_unsubscribe goes on the open connection
  let told = true; // a gateway without a journal keeps no conversation (an older one knows no `forget`)
  if (c && past.journal) {
    told = false;
    try {
      if (c.online) told = !!(await c.forget());
    } catch { /* said below */ }
  }
  if (client !== c) return; // paired again meanwhile
  stop();
  forgetHistory(store.get(KEY_DEVICE));
  store.del(KEY_TOKEN);
  store.del(KEY_DEVICE);
  for (const n of [...ui.messages.children]) dropItem(n);
  ui.messages.replaceChildren();
  bubbles.clear();
  cards.clear();
  closedAway.clear();
  liveAliases.clear();
  showTyping(false);
  avatarQueue.length = 0;
  setAvatar('idle');
  status = { state: 'offline' };
  renderStatus();
  pairMessage('');
  devices.reset();
  showScreen('pair');
  ui.forget.hidden = true;
  if (!told) notice('The gateway could not be reached, so it still keeps this device’s conversation (until its own limits drop it). This browser forgot it.');
}

// A form for Enter and password managers; it is never submitted (CSP form-action 'none').
$('pair-form').addEventListener('submit', (e) => {
  e.preventDefault();
  pair(ui.tokenInput.value);
});
ui.forget.addEventListener('click', () => ui.forgetDialog.showModal());
$('forget-cancel').addEventListener('click', () => ui.forgetDialog.close());
$('forget-confirm').addEventListener('click', () => {
  ui.forgetDialog.close();
  forget();
});
ui.retry.addEventListener('click', () => {
  if (!client) return;
  if (client.replaced) client.connect();
  else client.reconnectNow();
});
window.addEventListener('hashchange', () => {
  const link = linkFromFragment();
  if (link) linked(link);
});
// The network back, a shown tab, a page back from the back/forward cache: HermesClient
// reconnects by itself (resume()), and never takes the device back from the tab that
// replaced this one (H5).
document.addEventListener('visibilitychange', () => {
  // Another tab of this browser took the device over (H5); coming back takes it again.
  if (document.visibilityState === 'visible' && client && client.replaced) client.connect();
});

setInterval(() => {
  if (client && status.state === 'offline') renderStatus();
  for (const c of cards.values()) tickCard(c);
}, 1000);

// Install and notifications (issue 18, push.js).
const push = initPush({ getClient: () => client, notice });
initNotificationOpen(ui.messages);
registerServiceWorker();

(function boot() {
  const link = linkFromFragment();
  const stored = store.get(KEY_TOKEN);
  renderStatus();
  if (stored) start(stored);
  if (link) linked(link); // pairs when no token is stored; asks when another one is
  else if (!stored) showScreen('pair');
})();
