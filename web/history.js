// The chat's history on this device, in IndexedDB: one database per device id, so
// "Forget this device" deletes exactly that device's records. No DOM here; app.js renders.
// With a gateway that keeps a journal (issue 24) it is a cache of that journal: the gateway
// replays what came after the journal seq stored here, and `history` pages give the rest.
//
// A record is { key, seq, at, from, type, jseq?, ... }: `key` is the bubble's key in the page
// (server ids for agent messages and media, the app's own ids for user messages, `c:<id>`
// for cards), so a record written twice is one record; `seq` is its order key (journalKey()
// for an entry of the journal, else one past the largest so far) and stays the same when a
// record is updated; `jseq` is the journal's seq of its latest change, when known. Media
// records also carry `bytes` (their Blob's size).
//
// Writes are queued and flushed in one transaction a moment later, so rendering never waits
// for the disk. The journal seq this page has kept goes in the same transaction as the
// records it covers: a page that dies before a flush resumes from the seq before it, and
// the gateway replays what was lost. Any IndexedDB failure (private mode, quota, a blocked
// open) turns history off for this page with one console.warn: the chat goes on without it.

import { validateCard } from '/protocol.js';

export const MAX_RECORDS = 2000;
export const MAX_MEDIA_BYTES = 50 * 1024 * 1024;
const FLUSH_MS = 200;
const DB_VERSION = 2; // 2: the `meta` store (the journal seq kept)

// Order keys of journal entries: far above the time-based keys of records kept before the
// journal (microseconds since 1970, below 2^52 until 2112), 1000 apart so that the person's
// own messages, waiting for their seq, fit between two entries.
const JOURNAL_BASE = 2 ** 52;
export const journalKey = (jseq) => JOURNAL_BASE + jseq * 1000;

const dbName = (deviceId) => `hermes-history-${deviceId}`;

// A file as a record: its Blob itself (IndexedDB stores it), its name and type.
export function mediaRecord(from, id, d) {
  const media = { kind: d.kind, mime: d.mime, filename: d.filename, caption: d.caption, size: d.size, url: d.url, blob: d.blob };
  const r = { from, type: 'media', id, media, final: from === 'agent' };
  if (d.blob) r.bytes = d.blob.size; // only media with bytes count against the media budget
  return r;
}

/**
 * One `history` item of the journal (L59) as a record, or null for one this page cannot
 * show. `blobs`: file bytes by id that came some other way (a `history` item has none).
 */
export function recordOfItem(i, blobs = new Map()) {
  if (!Number.isInteger(i.seq) || typeof i.id !== 'string' || !i.id) return null;
  const t = String(i.t).toLowerCase();
  const base = { seq: journalKey(i.seq), jseq: i.seq, at: null, id: i.id };
  const file = (from, d) => ({ ...base, ...mediaRecord(from, i.id, { ...d, blob: blobs.get(i.id) || null }), final: true });
  const meta = { kind: i.kind, mime: i.mime || '', filename: i.filename || '', caption: i.caption || '', size: i.size || 0, url: i.url };
  if (i.from === 'user') {
    if (t === 'text') return { ...base, key: i.id, from: 'user', type: 'text', text: String(i.text ?? ''), final: true };
    if (t === 'media') return { key: i.id, ...file('user', meta) };
    if (t === 'audio') {
      const voice = { ...meta, kind: 'voice', mime: `audio/${i.format || 'wav'}`, filename: 'Voice message', caption: i.text || '' };
      return { key: i.id, ...file('user', voice) };
    }
    return null;
  }
  if (t === 'message') return { ...base, key: 'm:' + i.id, from: 'agent', type: 'text', text: String(i.text ?? ''), final: i.final !== false };
  if (t === 'media') return { key: 'f:' + i.id, ...file('agent', meta) };
  if (t !== 'prompt') return null;
  const card = validateCard(i);
  if (!card) return null;
  const closed = i.closed && typeof i.closed === 'object' ? i.closed : null;
  if (!closed) return { ...base, key: 'c:' + i.id, type: 'card', card, state: 'open' };
  const optionId = typeof closed.option_id === 'string' ? closed.option_id.toLowerCase() : null;
  const option = optionId && card.options.find((o) => o.id === optionId);
  card.state = closed.expired === true ? 'expired' : 'done';
  const result = card.state === 'expired' ? 'expired' : option ? option.label : optionId || 'done';
  return { ...base, key: 'c:' + i.id, type: 'card', card, state: card.state, result, optionId };
}

function req(r) {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error || new Error('transaction aborted'));
  });
}

function openDb(name) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open(name, DB_VERSION);
    r.onupgradeneeded = (e) => {
      if (e.oldVersion < 1) {
        const items = r.result.createObjectStore('items', { keyPath: 'key' });
        items.createIndex('seq', 'seq', { unique: false });
        // Only media records have `bytes`, so this index lists exactly them, oldest first,
        // and its keys alone (no Blob read) are enough to sum their sizes.
        items.createIndex('media', ['seq', 'bytes'], { unique: false });
      }
      if (e.oldVersion < 2) r.result.createObjectStore('meta');
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.onblocked = () => reject(new Error('the history database is blocked by another tab'));
  });
}

export class History {
  constructor() {
    this.db = null;
    this.pending = new Map(); // key → record, the latest version wins
    this.timer = null;
    this.flushing = Promise.resolve();
    this.lastSeq = 0; // the largest order key stored
    this.count = 0; // records stored when it opened
    this.journalSeq = 0; // the journal seq stored: everything up to it is in the records
    this.pendingJournalSeq = null;
    this.warned = false;
  }

  // Resolves to a History that works, or does nothing once storage has failed.
  static async open(deviceId) {
    const h = new History();
    try {
      if (!globalThis.indexedDB) throw new Error('IndexedDB is not available');
      h.db = await openDb(dbName(deviceId));
      h.db.onversionchange = () => h.close(); // a Forget in another tab deletes it
      await h.readState();
      // A phone may freeze or kill a hidden page at once: what is queued is written as the
      // page goes away, not FLUSH_MS later (a reply must not be lost to a quick reload).
      if (globalThis.addEventListener) {
        h.onHide = (e) => {
          if (e.type === 'pagehide' || !globalThis.document || document.visibilityState === 'hidden') h.flush();
        };
        globalThis.addEventListener('pagehide', h.onHide);
        globalThis.addEventListener('visibilitychange', h.onHide);
      }
    } catch (e) {
      h.fail(e);
    }
    return h;
  }

  // Deletes the device's database; resolves even when there was none or storage is off.
  static async forget(deviceId) {
    try {
      await req(indexedDB.deleteDatabase(dbName(deviceId)));
    } catch { /* nothing stored, nothing to clear */ }
  }

  get enabled() {
    return this.db !== null;
  }

  fail(e) {
    this.close();
    if (!this.warned) console.warn('Chat history is off in this browser:', e && e.message ? e.message : e);
    this.warned = true;
  }

  close() {
    if (this.onHide && globalThis.removeEventListener) {
      globalThis.removeEventListener('pagehide', this.onHide);
      globalThis.removeEventListener('visibilitychange', this.onHide);
      this.onHide = null;
    }
    clearTimeout(this.timer);
    this.pending.clear();
    if (this.db) this.db.close();
    this.db = null;
  }

  async readState() {
    const tx = this.db.transaction(['items', 'meta'], 'readonly');
    const items = tx.objectStore('items');
    const [count, newest, seq] = await Promise.all([
      req(items.count()),
      req(items.index('seq').openKeyCursor(null, 'prev')),
      req(tx.objectStore('meta').get('journalSeq')),
    ]);
    this.count = count;
    this.lastSeq = newest ? newest.key : 0;
    this.journalSeq = Number.isInteger(seq) ? seq : 0;
  }

  put(record) {
    if (!this.db) return;
    this.pending.set(record.key, record);
    this.schedule();
  }

  // The journal seq this page now holds everything up to; written with the records queued.
  putJournalSeq(seq) {
    if (!this.db) return;
    this.pendingJournalSeq = seq;
    this.schedule();
  }

  schedule() {
    if (!this.timer) this.timer = setTimeout(() => this.flush(), FLUSH_MS);
  }

  // Writes what is queued, then drops the oldest records beyond the bounds.
  flush() {
    clearTimeout(this.timer);
    this.timer = null;
    const seq = this.pendingJournalSeq;
    if (!this.db || (!this.pending.size && seq === null)) return this.flushing;
    const batch = [...this.pending.values()];
    this.pending.clear();
    this.pendingJournalSeq = null;
    this.flushing = this.flushing.then(() => this.write(batch, seq)).catch((e) => this.fail(e));
    return this.flushing;
  }

  async write(batch, seq) {
    if (!this.db) return;
    const tx = this.db.transaction(['items', 'meta'], 'readwrite');
    const items = tx.objectStore('items');
    for (const r of batch) items.put(r);
    if (seq !== null) tx.objectStore('meta').put(seq, 'journalSeq');
    await done(tx);
    if (seq !== null) this.journalSeq = seq;
    if (batch.length) await this.prune();
  }

  // Which of `keys` are stored (or queued): a page of the journal skips what is here.
  async has(keys) {
    const found = new Set(keys.filter((k) => this.pending.has(k)));
    if (!this.db) return found;
    try {
      const store = this.db.transaction('items', 'readonly').objectStore('items');
      const got = await Promise.all(keys.map((k) => req(store.getKey(k))));
      got.forEach((k, i) => k !== undefined && found.add(keys[i]));
    } catch (e) {
      this.fail(e);
    }
    return found;
  }

  async prune() {
    const tx = this.db.transaction('items', 'readwrite');
    const items = tx.objectStore('items');
    const extra = (await req(items.count())) - MAX_RECORDS;
    if (extra > 0) {
      const keys = await req(items.index('seq').getAllKeys(null, extra)); // the oldest
      for (const k of keys) items.delete(k);
    }
    // Media, newest first: every record past the budget goes. A key cursor reads no Blob.
    let total = 0;
    await new Promise((resolve, reject) => {
      const r = items.index('media').openKeyCursor(null, 'prev');
      r.onerror = () => reject(r.error);
      r.onsuccess = () => {
        const c = r.result;
        if (!c) return resolve();
        total += c.key[1];
        if (total > MAX_MEDIA_BYTES) items.delete(c.primaryKey);
        c.continue();
      };
    });
    await done(tx);
  }

  // Up to `n` records with seq below `before` (all when null), oldest first.
  async page(before, n) {
    if (!this.db) return [];
    await this.flush();
    try {
      const tx = this.db.transaction('items', 'readonly');
      const range = before == null ? null : IDBKeyRange.upperBound(before, true);
      const out = [];
      await new Promise((resolve, reject) => {
        const r = tx.objectStore('items').index('seq').openCursor(range, 'prev');
        r.onerror = () => reject(r.error);
        r.onsuccess = () => {
          const c = r.result;
          if (!c || out.length >= n) return resolve();
          out.push(c.value);
          c.continue();
        };
      });
      return out.reverse();
    } catch (e) {
      this.fail(e);
      return [];
    }
  }

  // The cards stored open with seq below `before`: older than the window the page loaded,
  // and never sent again by a gateway with a journal (L58). A scan of at most MAX_RECORDS.
  async openCardsBefore(before) {
    if (!this.db || before == null) return [];
    try {
      const tx = this.db.transaction('items', 'readonly');
      const index = tx.objectStore('items').index('seq');
      const older = await req(index.getAll(IDBKeyRange.upperBound(before, true)));
      return older.filter((r) => r.type === 'card' && r.state === 'open');
    } catch (e) {
      this.fail(e);
      return [];
    }
  }

  // Up to `n` records with seq above `after`, oldest first.
  async pageAfter(after, n) {
    if (!this.db) return [];
    await this.flush();
    try {
      const tx = this.db.transaction('items', 'readonly');
      const index = tx.objectStore('items').index('seq');
      return await req(index.getAll(IDBKeyRange.lowerBound(after, true), n));
    } catch (e) {
      this.fail(e);
      return [];
    }
  }
}
