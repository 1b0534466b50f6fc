// Protocol v1 client for hermes-mobile. No DOM: it needs WebSocket, EventTarget, CustomEvent,
// crypto.getRandomValues, Blob and timers, so it runs in a page, a worker, a WebView or Node.
// sdk/typescript/protocol.js is a byte-for-byte copy (the npm package hermes-mobile-client):
// edit this file, then run `npm run sync` there.
// The API and every event are documented in docs/web-client.md. Rule ids (G1, M2, U1, …) are
// those of the protocol's decisions.md.

export const MAX_TEXT_CHARS = 12000; // G1: Unicode scalar values, never bytes
export const MAX_MEDIA_BYTES = 8 * 1024 * 1024; // one file, both directions
export const MAX_AUDIO_BYTES = 8 * 1024 * 1024;
export const MEDIA_CHUNK_BYTES = 3 * 1024 * 1024; // U1: the protocol's largest chunk (raw bytes)
// What this client sends per chunk (U1: the gateway takes chunks of any size). One ws.send
// per part: small parts let the keep-alive ping through on a slow link; 8 MiB is 16 parts.
export const UPLOAD_PART_BYTES = 512 * 1024;
export const MAX_MEDIA_PARTS = 2048;
export const PROMPT_OPTIONS = {
  exec_approval: ['once', 'session', 'always', 'deny'],
  slash_confirm: ['once', 'always', 'cancel'],
  clarify: null, // c0, c1, … and other (P3)
};
const AVATAR_STATES = ['idle', 'thinking', 'speaking'];
const UPLOAD_KINDS = ['image', 'video', 'document', 'audio'];
const DOWNLOAD_KINDS = ['image', 'voice', 'video', 'document', 'animation'];
const FATAL_AUTH = ['auth_failed', 'forbidden'];
// What a journal's `received` confirms (L58); a card's answer is still confirmed by a pong.
const RECEIVED_TYPES = ['text', 'audio', 'media'];
export const HISTORY_MAX_LIMIT = 200; // L59: a larger `limit` is cut to this

/** An error with a protocol-style `code` (too_big, bad_frame, prompt_closed, …). */
export class HermesError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'HermesError';
    this.code = code;
  }
}

/** Counts characters as G1 does: Unicode scalar values (code points). */
export function charCount(s) {
  let n = 0;
  for (const _ of s) n++; // eslint-disable-line no-unused-vars
  return n;
}

// Hidden characters (issue 23): Unicode format characters (Cf: the bidi controls such as
// U+202E, zero-width spaces and joiners), line and paragraph separators (Zl, Zp), and
// controls (Cc) other than TAB and LF. Text that holds one can display as something other
// than what it is, so a card could show one command and run another (Trojan Source,
// CVE-2021-42574). The gateway (Rust) and hermes_mobile_client (Python) use the same class.
// eslint-disable-next-line no-control-regex
const HIDDEN_CHAR = /([\p{Cf}\p{Zl}\p{Zp}\u0000-\u0008\u000B-\u001F\u007F-\u009F])/u;

/** True when `s` holds a hidden character (Cf, Zl, Zp, or a control but TAB and LF). */
export function hasHiddenChars(s) {
  return typeof s === 'string' && HIDDEN_CHAR.test(s);
}

// The visible stand-in for a hidden character: `⟨U+202E⟩` (upper-case hex, 4 digits or more).
function hiddenCharMarker(c) {
  return `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`;
}

/**
 * `s` cut at its hidden characters: text at even indices, the markers standing for hidden
 * characters at odd ones (for a page that styles the markers). Joined, it is revealHiddenChars(s).
 */
export function splitHiddenChars(s) {
  const parts = String(s).split(HIDDEN_CHAR); // the capture keeps each character, at odd indices
  for (let i = 1; i < parts.length; i += 2) parts[i] = hiddenCharMarker(parts[i]);
  return parts;
}

/**
 * `s` with every hidden character replaced by its marker (`rm x\u202E` → `rm x⟨U+202E⟩`), for
 * display only: what is sent back (a card's option id, say) never changes.
 */
export function revealHiddenChars(s) {
  return splitHiddenChars(s).join('');
}

function randomHex(bytes) {
  const a = new Uint8Array(bytes);
  crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** A new device id, `web-` + 16 hex digits. Generate it once and keep it (H4). */
export function newDeviceId() {
  return 'web-' + randomHex(8);
}

/** A new frame id: time-ordered and random, well under the 128 characters of G8. */
export function newId(prefix = 'w') {
  return prefix + '-' + Date.now().toString(36) + '-' + randomHex(6);
}

/** `kind` for an upload, from its MIME type: image, video, audio, else document. */
export function kindFromMime(mime) {
  const m = String(mime || '').toLowerCase();
  if (m.startsWith('image/')) return 'image';
  if (m.startsWith('video/')) return 'video';
  if (m.startsWith('audio/')) return 'audio';
  return 'document';
}

export function bytesToBase64(u8) {
  let s = '';
  for (let i = 0; i < u8.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

export function base64ToBytes(b64) {
  const s = atob(b64); // throws on invalid base64
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** Base64url without padding (RFC 4648 §5), as Web Push keys travel (RFC 8291, RFC 8292). */
export function bytesToBase64Url(u8) {
  return bytesToBase64(u8).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Decodes base64url or base64, with or without padding. Throws on anything else. */
export function base64UrlToBytes(s) {
  const b64 = String(s).replace(/-/g, '+').replace(/_/g, '/').replace(/=+$/, '');
  return base64ToBytes(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
}

// A push subscription key given as base64(url) text, an ArrayBuffer or bytes → base64url.
function keyToBase64Url(k) {
  if (typeof k === 'string') return bytesToBase64Url(base64UrlToBytes(k));
  if (k instanceof ArrayBuffer) return bytesToBase64Url(new Uint8Array(k));
  if (ArrayBuffer.isView(k)) return bytesToBase64Url(new Uint8Array(k.buffer, k.byteOffset, k.byteLength));
  throw new HermesError('bad_frame', 'a subscription key is missing');
}

const lower = (v) => (typeof v === 'string' ? v.toLowerCase() : ''); // G2

// A caller's own id: 1 to 128 characters (G8: the gateway would cut a longer one, and its
// answers would then name an id the caller never gave). Undefined or '' for a new id.
function checkId(id) {
  if (id === undefined || id === null || id === '') return '';
  if (typeof id !== 'string' || charCount(id) > 128) throw new HermesError('bad_frame', 'an id must be 1 to 128 characters');
  return id;
}

// At most 200 characters (G8), the extension kept, so the frame stays inside the schema
// (the gateway would otherwise cut it to 200 characters itself, extension and all).
function cutFilename(name) {
  const chars = Array.from(name);
  if (chars.length <= 200) return name;
  const dot = name.lastIndexOf('.');
  const ext = dot > 0 ? Array.from(name.slice(dot)) : [];
  const keep = ext.length > 0 && ext.length <= 16 ? ext : [];
  return chars.slice(0, 200 - keep.length).join('') + keep.join('');
}
const isBlank = (s) => typeof s !== 'string' || s.trim() === '';

/**
 * Checks a `prompt` card (protocol "prompt", P3, P6) and returns a clean copy, or null.
 * Options outside the table of its kind are dropped; a card without options is invalid.
 */
export function validateCard(f) {
  if (!f || typeof f.id !== 'string' || !f.id || typeof f.text !== 'string') return null;
  const kind = lower(f.kind);
  if (!(kind in PROMPT_OPTIONS) || !Array.isArray(f.options)) return null;
  const allowed = PROMPT_OPTIONS[kind];
  const seen = new Set();
  const options = [];
  for (const o of f.options) {
    if (!o || typeof o.id !== 'string') continue;
    const id = o.id.toLowerCase();
    const ok = allowed ? allowed.includes(id) : /^c\d+$/.test(id) || id === 'other';
    if (!ok || seen.has(id)) continue;
    seen.add(id);
    const style = o.style === 'primary' || o.style === 'danger' ? o.style : '';
    options.push({ id, label: typeof o.label === 'string' && o.label ? o.label : id, style });
  }
  if (!options.length) return null;
  const t = f.timeout_seconds;
  // 0: no time left, a card the journal replays as closed since (its prompt_done follows, L58).
  const timeoutSeconds = Number.isInteger(t) && t >= 0 ? t : 300;
  const command = typeof f.command === 'string' ? f.command : '';
  const description = typeof f.description === 'string' ? f.description : '';
  // The gateway says so (issue 23), and an older gateway does not: checked here as well.
  const shown = [f.text, command, description, ...options.map((o) => o.label)];
  return {
    id: f.id,
    kind,
    text: f.text,
    options,
    command,
    description,
    session: typeof f.session === 'string' ? f.session : '',
    hiddenChars: f.hidden_chars === true || shown.some(hasHiddenChars),
    timeoutSeconds,
    expiresAt: Date.now() + timeoutSeconds * 1000,
    state: 'open', // open | done | expired
    answer: null,
    result: null,
  };
}

// What a refused `POST /pair` says (issue 26); anything else is `unavailable`, except `busy`
// (503: the commit did not finish in time), which is `not_kept`: the pairing was not
// confirmed, though it may still be kept later, and either way the next step is a new code.
const PAIR_ERRORS = ['forbidden', 'too_many_attempts', 'bad_request', 'full', 'owner_device', 'unavailable', 'not_kept'];
const PAIR_ALIASES = new Map([['busy', 'not_kept']]);
const PAIR_MESSAGES = {
  forbidden: 'the pairing code is wrong, spent or expired',
  too_many_attempts: 'too many failed pairing attempts',
  bad_request: 'the gateway refused the pairing request',
  full: 'the gateway has as many paired devices as it keeps',
  owner_device: "this device id is an owner device's: pair it with a code from hermes-mobile pair --owner",
  unavailable: 'this gateway cannot pair with a code',
  not_kept: 'the gateway could not save the pairing, and the code is spent: run hermes-mobile pair again for a new one',
  busy: 'the gateway is too busy to confirm the pairing, which may still be kept later: run hermes-mobile pair again for a new code',
};

// Retry-After in seconds (RFC 9110: a number of seconds or an HTTP date); 60 when it is
// missing or unreadable, so a caller always has a wait to show.
function retryAfterSeconds(value) {
  const v = String(value || '').trim();
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, Math.ceil((at - Date.now()) / 1000)) : 60;
}

/**
 * Exchanges a pairing code (the `#pair=` of the link `hermes-mobile pair` prints, issue 26)
 * for a token of this device's own: `POST <baseUrl>/pair`. `baseUrl` is the gateway's
 * http(s) origin (the page's own when empty); `device` is `{id, name, platform}`, each
 * optional (without an id the gateway makes one). Resolves `{token, deviceId}`: connect with
 * both, the token works only with that id. Rejects with a HermesError whose code is
 * `forbidden` (a wrong, spent or expired code), `too_many_attempts` (with `retryAfter`, in
 * seconds), `bad_request`, `full`, `unavailable` (no store, or a gateway older than pairing
 * codes), `not_kept` (not confirmed: after a failed commit, 500, the code is spent and
 * nothing is paired; after a 503 `busy` the pairing may still complete later; either way
 * run `hermes-mobile pair` again for a new code) or `network`. Redirects are refused
 * (`network`): a 307 or 308 would send the code on to wherever it points.
 */
export async function pairWithCode(baseUrl, code, device = {}) {
  if (typeof code !== 'string' || !code.trim()) throw new HermesError('bad_request', 'no pairing code');
  const origin = baseUrl || (globalThis.location && globalThis.location.origin) || '';
  const body = { code: code.trim(), device: {} };
  for (const k of ['id', 'name', 'platform']) {
    if (device && typeof device[k] === 'string' && device[k]) body.device[k] = device[k];
  }
  let r;
  try {
    r = await fetch(String(origin).replace(/\/+$/, '') + '/pair', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit', // the code is the only credential
      redirect: 'error', // a 307/308 would POST the code again, elsewhere
    });
  } catch (e) {
    throw new HermesError('network', `the gateway could not be reached (${e && e.message ? e.message : e})`);
  }
  let answer = null;
  try {
    answer = await r.json();
  } catch { /* not JSON: a gateway older than pairing codes, or a proxy's page */ }
  const id = answer && answer.device && answer.device.id;
  if (r.ok && answer && typeof answer.token === 'string' && answer.token && typeof id === 'string' && id) {
    return { token: answer.token, deviceId: id };
  }
  const said = answer && typeof answer.error === 'string' ? answer.error : '';
  const known = PAIR_ERRORS.includes(said) ? said : PAIR_ALIASES.get(said) || '';
  const why = known || (r.status === 403 ? 'forbidden' : r.status === 429 ? 'too_many_attempts' : 'unavailable');
  const detail = answer && typeof answer.message === 'string' && answer.message ? answer.message : PAIR_MESSAGES[known ? said : why];
  const err = new HermesError(why, r.ok || known ? detail : `${detail} (HTTP ${r.status})`);
  if (why === 'too_many_attempts') err.retryAfter = retryAfterSeconds(r.headers.get('Retry-After'));
  throw err;
}

function defaultUrl() {
  const loc = globalThis.location;
  if (!loc || !loc.host) throw new HermesError('bad_config', 'no url and no location');
  return (loc.protocol === 'https:' ? 'wss://' : 'ws://') + loc.host + '/ws';
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The page's lifecycle events, where there is a page: a phone freezes a hidden tab and its
// socket dies unnoticed, so coming back must reconnect at once. Null in Node or a worker.
function defaultLifecycle() {
  const doc = typeof document !== 'undefined' ? document : null;
  const win = typeof window !== 'undefined' ? window : null;
  return doc || win ? { document: doc, window: win } : null;
}

/**
 * The Protocol v1 client. See docs/web-client.md for options, methods and events.
 * Connection states: idle → connecting → online → offline (retrying) | noaccess | closed.
 */
// Whether two cards under one id ask the same thing (a card sent again after a reconnect).
function sameCard(a, b) {
  const options = (c) => JSON.stringify(c.options.map((o) => [o.id, o.label]));
  return a.kind === b.kind && a.text === b.text && a.command === b.command &&
    a.description === b.description && options(a) === options(b);
}

export class HermesClient extends EventTarget {
  constructor(opts = {}) {
    super();
    if (typeof opts.token !== 'string' || !opts.token) throw new HermesError('bad_config', 'token is required');
    this.opts = {
      url: opts.url || null,
      token: opts.token,
      deviceId: opts.deviceId || newDeviceId(),
      deviceName: opts.deviceName || 'Web browser',
      platform: opts.platform || 'web',
      appVersion: opts.appVersion || '1.0.0',
      user: opts.user || null,
      pingIntervalMs: opts.pingIntervalMs ?? 25000,
      backoffMinMs: opts.backoffMinMs ?? 500,
      backoffMaxMs: opts.backoffMaxMs ?? 15000,
      resendWindowMs: opts.resendWindowMs ?? 60000,
      resendConfirmed: !!opts.resendConfirmed,
      readyTimeoutMs: opts.readyTimeoutMs ?? 20000,
      typingIntervalMs: opts.typingIntervalMs ?? 2000,
      requestTimeoutMs: opts.requestTimeoutMs ?? 15000,
      wakeCheckMs: opts.wakeCheckMs ?? 5000,
      seqStore: opts.seqStore || null,
      WebSocket: opts.WebSocket || globalThis.WebSocket,
    };
    // Fail here, not in a retry loop: Node before 22 has no global WebSocket and no location.
    if (!this.opts.WebSocket) throw new HermesError('bad_config', 'no WebSocket: pass options.WebSocket (in Node < 22, the ws package)');
    if (!this.opts.url) defaultUrl();
    // {document, window} whose events wake the client; false for none.
    this._lifecycle = opts.lifecycle === undefined ? defaultLifecycle() : opts.lifecycle || null;
    this._unwatch = null;
    this.deviceId = this.opts.deviceId;
    this.state = 'idle';
    this.ready = null; // the last `ready` frame
    this.capabilities = {}; // the last `ready` frame's capabilities
    this.maxTextChars = MAX_TEXT_CHARS;
    this.maxMediaBytes = MAX_MEDIA_BYTES;
    this.prompts = new Map(); // id → card (validateCard)
    this._ws = null;
    this._conn = 0; // connection counter: frames of a dead socket are never mistaken
    this._isReady = false;
    this._stopped = true;
    this._attempt = 0;
    this._retryTimer = null;
    this._pingTimer = null;
    this._readyTimer = null;
    this._lastRx = 0; // the last sign of life: a frame received, or the send buffer draining
    this._lastBuffered = 0;
    this._replaced = false; // H5: dropped as `replaced`; only connect() opens again
    this._pingSeq = 0;
    this._fatal = null;
    this._fatalMessage = null;
    this._outbox = []; // what the agent must get: text, audio, media, prompt answers
    this._pumping = false;
    this._messages = new Map(); // agent message id → join state (M1/M2)
    this._downloads = new Map(); // media id → parts being reassembled
    this._lastTyping = 0;
    this._requests = new Map(); // frame id → a request waiting for its answer (push_*, history, devices…)
    this._wakeTimer = null;
    // The journal (issue 24): the highest seq this client has kept, sent back as
    // `hello.resume.after` so the gateway replays exactly what came after it.
    this.seq = 0;
    this._seqState = this.opts.seqStore ? 'unread' : 'read'; // unread → reading → read
    this._resumeAfter = 0; // what this connection's hello said
    this.journal = false; // the last `ready` carried `seq`: `received` confirms, `resume` works
    this.replaying = false; // between such a `ready` and its `resumed`
  }

  // ---- connection -------------------------------------------------------------------

  /** Opens the connection (again). Resets the backoff. */
  connect() {
    this._stopped = false;
    this._replaced = false;
    this._fatal = null;
    this._fatalMessage = null;
    this._attempt = 0;
    clearTimeout(this._retryTimer);
    this._retryTimer = null;
    this._watch();
    if (this._seqState === 'unread') this._readSeq();
    else if (!this._ws) this._open();
  }

  // Reads the application's seq (option seqStore) once, before the first hello; a store that
  // fails counts as 0 (everything is replayed: more than needed, never less).
  _readSeq() {
    this._seqState = 'reading';
    const done = (n) => {
      if (Number.isInteger(n) && n > this.seq) this.seq = n;
      this._seqState = 'read';
      if (!this._stopped && !this._ws) this._open();
    };
    let n;
    try {
      n = this.opts.seqStore.load();
    } catch {
      n = 0;
    }
    if (n && typeof n.then === 'function') n.then(done, () => done(0));
    else done(n);
  }

  // A seq this client now holds everything up to (a message with all its chunks, a whole
  // file, a card, its closing): kept, and handed to the application's seqStore.
  _kept(seq) {
    if (!Number.isInteger(seq) || seq <= this.seq) return;
    this.seq = seq;
    this._saveSeq();
  }

  _saveSeq() {
    const store = this.opts.seqStore;
    if (!store) return;
    try {
      const r = store.save(this.seq);
      if (r && typeof r.catch === 'function') r.catch(() => {});
    } catch { /* the application's store; the next save tries again */ }
  }

  /**
   * Skips the backoff wait when offline (e.g. the network came back). Does nothing after
   * the device was taken over elsewhere (`replaced`, H5): only `connect()` takes it back.
   */
  reconnectNow() {
    if (this._stopped || this._replaced || this._ws || this.state === 'noaccess') return;
    clearTimeout(this._retryTimer);
    this._retryTimer = null;
    this._open();
  }

  /**
   * The app is in front again (a shown tab, a page back from the back/forward cache, the
   * network back; a native app's foreground event): reconnect now, skipping the backoff,
   * or, when the socket looks open, make sure it still lives (a frozen page's socket can be
   * dead without a close). The page's events call it by themselves (option `lifecycle`).
   * Like `reconnectNow()`, it does not take the device back after `replaced`.
   */
  resume() {
    if (this._stopped || this._replaced || this.state === 'noaccess') return;
    if (this._ws) {
      if (this._isReady) this._checkAlive();
      return; // still connecting: the ready timeout watches it
    }
    this._attempt = 0;
    clearTimeout(this._retryTimer);
    this._retryTimer = null;
    this._open();
  }

  // A ping that must be answered within wakeCheckMs, or the connection is dropped (and,
  // the page being shown, reopened at once).
  _checkAlive() {
    const conn = this._conn;
    const since = Date.now();
    this._ping();
    clearTimeout(this._wakeTimer);
    this._wakeTimer = setTimeout(() => {
      if (conn === this._conn && this._lastRx < since) this._drop(conn, 0, 'silent');
    }, this.opts.wakeCheckMs);
  }

  _hidden() {
    const doc = this._lifecycle && this._lifecycle.document;
    return !!doc && (doc.visibilityState === 'hidden' || doc.hidden === true);
  }

  // Listens to the page's lifecycle while connected; close() stops listening.
  _watch() {
    if (this._unwatch || !this._lifecycle) return;
    const { document: doc, window: win } = this._lifecycle;
    const wake = () => this.resume();
    const onVisible = () => { if (!this._hidden()) this.resume(); };
    const onPageShow = (e) => { if (e && e.persisted) this.resume(); };
    const on = [];
    const add = (target, type, fn) => {
      if (target && typeof target.addEventListener === 'function') {
        target.addEventListener(type, fn);
        on.push([target, type, fn]);
      }
    };
    add(doc, 'visibilitychange', onVisible);
    add(doc, 'resume', wake); // Chrome's Page Lifecycle: a frozen page runs again
    add(win, 'pageshow', onPageShow);
    add(win, 'online', wake);
    this._unwatch = () => on.forEach(([t, type, fn]) => t.removeEventListener(type, fn));
  }

  /** Closes the connection for good; queued messages are kept until `connect()`. */
  close() {
    if (this._unwatch) this._unwatch();
    this._unwatch = null;
    this._stopped = true;
    clearTimeout(this._retryTimer);
    this._retryTimer = null;
    const ws = this._ws;
    this._detach();
    if (ws) try { ws.close(1000, 'bye'); } catch { /* already closed */ }
    this._setState('closed', {});
  }

  get online() {
    return this._isReady;
  }

  /** True after the gateway closed this connection as `replaced`, until `connect()`. */
  get replaced() {
    return this._replaced;
  }

  _setState(state, detail) {
    this.state = state;
    this._emit('status', { state, ...detail });
  }

  _open() {
    if (this._seqState !== 'read') return; // _readSeq opens when it has the seq
    const WS = this.opts.WebSocket;
    const conn = ++this._conn;
    this._isReady = false;
    this._fatal = null;
    this._fatalMessage = null;
    this._lastBuffered = 0;
    this._setState('connecting', { attempt: this._attempt });
    let ws;
    try {
      ws = new WS(this.opts.url || defaultUrl());
    } catch (e) {
      this._drop(conn, 0, String(e && e.message));
      return;
    }
    this._ws = ws;
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => {
      if (conn !== this._conn) return;
      const device = {
        id: this.deviceId,
        name: this.opts.deviceName,
        platform: this.opts.platform,
        app_version: this.opts.appVersion,
      };
      // Always sent: a gateway without a journal ignores it (G5), and `ready.seq` says which.
      this._resumeAfter = this.seq;
      const hello = { t: 'hello', id: newId('h'), token: this.opts.token, device, resume: { after: this.seq } };
      if (this.opts.user) hello.user = this.opts.user;
      this._lastRx = Date.now();
      this._sendRaw(hello);
      this._readyTimer = setTimeout(() => this._drop(conn, 0, 'no ready'), this.opts.readyTimeoutMs);
    };
    ws.onmessage = (ev) => {
      if (conn !== this._conn) return;
      this._lastRx = Date.now();
      let data = ev.data;
      if (typeof data !== 'string') {
        try {
          data = new TextDecoder('utf-8', { fatal: true }).decode(data); // G6
        } catch {
          this._emit('invalid', { reason: 'binary frame is not UTF-8' });
          return;
        }
      }
      let f;
      try {
        f = JSON.parse(data);
      } catch {
        this._emit('invalid', { reason: 'frame is not JSON' });
        return;
      }
      if (!f || typeof f !== 'object' || Array.isArray(f)) {
        this._emit('invalid', { reason: 'frame is not an object' });
        return;
      }
      try {
        this._handle(f, conn);
      } catch (e) {
        this._emit('invalid', { reason: String(e && e.message), frame: f });
      }
    };
    ws.onclose = (ev) => this._drop(conn, ev.code, ev.reason || '');
    ws.onerror = () => {}; // a close always follows
  }

  _detach() {
    const ws = this._ws;
    if (ws) ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    this._ws = null;
    this._isReady = false;
    this.replaying = false;
    clearInterval(this._pingTimer);
    clearTimeout(this._readyTimer);
    clearTimeout(this._wakeTimer);
    this._pingTimer = this._readyTimer = this._wakeTimer = null;
    // An answer cannot come on another connection (the gateway keeps no request state).
    for (const id of [...this._requests.keys()]) this._settle(id, new HermesError('offline', 'the connection to the gateway was lost'));
  }

  // The connection `conn` ended (closed, refused, silent or without `ready`).
  _drop(conn, code, reason) {
    if (conn !== this._conn || this._stopped) return;
    const ws = this._ws;
    this._detach();
    if (ws) try { ws.close(); } catch { /* ignore */ }
    this._conn++; // frames of the old socket are ignored from now on
    this._emit('typing', { active: false });
    const fatal = this._fatal || (code === 1008 && FATAL_AUTH.includes(reason) ? reason : null);
    if (fatal && FATAL_AUTH.includes(fatal)) {
      // auth_failed / forbidden: the token or the device binding is wrong; retrying cannot help.
      this._stopped = true;
      this._setState('noaccess', { code: fatal, message: this._fatalMessage || '' });
      return;
    }
    if (reason === 'replaced') {
      // H5: the same device id connected elsewhere (another tab). Fighting back would loop.
      this._replaced = true;
      this._setState('offline', { reason: 'replaced', retryAt: 0, retryInMs: 0 });
      return;
    }
    const why = fatal || reason || String(code || '');
    if (this._hidden()) {
      // A hidden page may be frozen any moment: no retries in the background, which would
      // only spin. Being shown again reconnects at once (resume()).
      this._setState('offline', { reason: why, retryAt: 0, retryInMs: 0, attempt: this._attempt, paused: true });
      return;
    }
    const base = Math.min(this.opts.backoffMaxMs, this.opts.backoffMinMs * 2 ** this._attempt);
    const delay = Math.round(base * (0.5 + Math.random() * 0.5)); // exponential, with jitter
    this._attempt = Math.min(this._attempt + 1, 30);
    this._retryTimer = setTimeout(() => {
      this._retryTimer = null;
      if (this._stopped || this._ws) return;
      if (this._hidden()) this._setState('offline', { reason: why, retryAt: 0, retryInMs: 0, attempt: this._attempt, paused: true });
      else this._open();
    }, delay);
    this._setState('offline', { reason: why, retryAt: Date.now() + delay, retryInMs: delay, attempt: this._attempt });
  }

  _sendRaw(frame) {
    const ws = this._ws;
    if (!ws || ws.readyState !== 1) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  _ping() {
    const ts = ++this._pingSeq;
    this._sendRaw({ t: 'ping', id: newId('p'), ts });
    return ts;
  }

  _onReady(f, conn) {
    clearTimeout(this._readyTimer);
    this._readyTimer = null;
    this._isReady = true;
    this._attempt = 0;
    this.ready = f;
    const caps = f.capabilities && typeof f.capabilities === 'object' ? f.capabilities : {};
    this.capabilities = caps;
    // L56: `seq` in `ready` means a journal; without it, a gateway as before (pongs confirm).
    this.journal = Number.isInteger(f.seq) && f.seq >= 0;
    this.replaying = this.journal;
    if (this.journal && f.seq < this._resumeAfter) {
      // Its latest seq is below ours: a new journal (a corrupt file was moved aside, L62).
      // What it holds would never be replayed after our seq: start again from 0.
      this.seq = 0;
      this._saveSeq();
      this._drop(conn, 0, 'journal reset');
      return;
    }
    if (Number.isInteger(caps.max_text_chars) && caps.max_text_chars > 0) this.maxTextChars = caps.max_text_chars;
    if (Number.isInteger(caps.max_media_bytes) && caps.max_media_bytes > 0) {
      this.maxMediaBytes = Math.min(caps.max_media_bytes, MAX_MEDIA_BYTES);
    }
    clearInterval(this._pingTimer);
    this._pingTimer = setInterval(() => {
      if (conn !== this._conn) return;
      this._alive(); // a big upload delays the pong; a draining send buffer is life too
      if (Date.now() - this._lastRx > this.opts.pingIntervalMs * 2 + 10000) {
        this._drop(conn, 0, 'silent'); // a dead TCP connection is noticed late by the browser
        return;
      }
      this._ping(); // keep-alive every 25 s (K1/K2)
    }, this.opts.pingIntervalMs);
    // I1/I2: sent but unconfirmed messages active in the last 60 s (sent, or an upload still
    // moving) go again with the same ids; the gateway drops repeats. Older unconfirmed ones
    // are reported as `unsent`.
    const now = Date.now();
    for (const e of [...this._outbox]) {
      const recent = e.activeAt && now - e.activeAt <= this.opts.resendWindowMs;
      if (e.confirmed) {
        // `received` means on disk: a journal never needs a confirmed message again.
        if (this.opts.resendConfirmed && !this.journal && recent) e.confirmed = false;
        else this._remove(e);
      } else if (e.activeAt && !recent) {
        this._remove(e);
        this._emit('unsent', { id: e.id, type: e.type });
      }
    }
    this._setState('online', {});
    this._emit('ready', {
      v: f.v,
      session: f.session,
      device: f.device,
      avatarUrl: typeof f.avatar_url === 'string' ? f.avatar_url : '',
      capabilities: caps,
      seq: this.journal ? f.seq : null,
      resumeAfter: this.journal ? this._resumeAfter : null,
    });
    this._pump(); // the re-sends first, then what was queued while offline
  }

  // ---- incoming frames --------------------------------------------------------------

  _handle(f, conn) {
    const t = lower(f.t);
    this._emit('frame', { frame: f });
    switch (t) {
      case 'ready':
        this._onReady(f, conn);
        break;
      case 'pong':
        this._onPong(f.ts, conn);
        break;
      case 'message':
        this._onMessage(f);
        break;
      case 'media':
        this._onMedia(f);
        break;
      case 'prompt':
        this._onPrompt(f);
        break;
      case 'prompt_done':
        this._onPromptDone(f);
        break;
      case 'avatar': {
        const s = lower(f.state);
        this._emit('avatar', { state: AVATAR_STATES.includes(s) ? s : 'idle' });
        break;
      }
      case 'typing':
        this._emit('typing', { active: f.stop !== true });
        break;
      case 'error':
        this._onError(f, conn);
        break;
      case 'received':
        this._onReceived(f);
        break;
      case 'resumed':
        // L58: the replay is over; what follows is live.
        this.replaying = false;
        this._emit('resumed', { seq: Number.isInteger(f.seq) ? f.seq : null, after: this._resumeAfter });
        break;
      case 'history':
      case 'forgotten':
      case 'devices':
      case 'revoked':
      case 'push_subscribed':
      case 'push_unsubscribed':
      case 'push_sent': {
        const r = typeof f.id === 'string' && this._requests.get(f.id);
        if (r && r.answer === t) this._settle(f.id, null, f);
        break;
      }
      default:
        break; // unknown types are ignored (protocol "Versioning")
    }
  }

  _onPong(ts, conn) {
    if (typeof ts !== 'number') return;
    // The gateway answers frames in order: a pong proves it read everything sent before
    // that ping on this connection.
    for (const e of [...this._outbox]) {
      if (!e.confirmed && e.conn === conn && e.done && e.ackSeq <= ts) this._confirm(e, null);
    }
  }

  // L58: the message is on the gateway's disk (a repeat of its id gets `received` again).
  _onReceived(f) {
    const e = typeof f.id === 'string' && this._outbox.find((x) => x.id === f.id && !x.confirmed);
    if (e) this._confirm(e, Number.isInteger(f.seq) ? f.seq : null);
  }

  _confirm(e, seq) {
    e.confirmed = true;
    if (e.type === 'media') this._progress(e, e.size, e.size);
    this._emit('confirmed', { id: e.id, type: e.type, seq });
    if (this.journal || !this.opts.resendConfirmed) this._remove(e);
  }

  _onError(f, conn) {
    const code = typeof f.code === 'string' ? f.code : 'unknown';
    const detail = {
      code,
      message: typeof f.message === 'string' ? f.message : '',
      fatal: f.fatal === true,
      id: typeof f.id === 'string' ? f.id : null,
    };
    if (detail.fatal) {
      this._fatal = code;
      this._fatalMessage = detail.message; // e.g. the hello throttle's "try again in N s" (L52)
    }
    // The answer to a request (push_*): its promise is rejected; `request` names its type so
    // that a page showing every error can leave this one to the caller.
    const req = detail.id && this._requests.get(detail.id);
    if (req) {
      detail.request = req.type;
      this._settle(detail.id, new HermesError(code, detail.message || code));
    }
    // G9: the error names the offending frame; a refused message is not sent again.
    const e = detail.id && this._outbox.find((x) => x.id === detail.id && x.conn === conn);
    detail.promptId = e && e.type === 'prompt' ? e.promptId : detail.id && this.prompts.has(detail.id) ? detail.id : null;
    if (e && !detail.fatal) {
      e.rejected = true;
      this._remove(e);
      this._emit('rejected', { id: e.id, type: e.type, code, message: detail.message, promptId: detail.promptId });
    }
    const card = detail.promptId && this.prompts.get(detail.promptId);
    if (card && card.state === 'open') card.answer = null; // e.g. clarify needs text (P3): answer again
    this._emit('error', detail);
    if (detail.fatal) setTimeout(() => this._drop(conn, 1008, code), 2000); // the close should follow
  }

  // M1/M2: join the chunks of the latest version; a new version starts at chunk 0.
  _onMessage(f) {
    if (typeof f.id !== 'string' || typeof f.text !== 'string') return this._emit('invalid', { reason: 'bad message', frame: f });
    const c = f.chunk && typeof f.chunk === 'object' ? f.chunk : {};
    const total = Number.isInteger(c.total) && c.total > 0 ? c.total : 1;
    const index = Number.isInteger(c.index) && c.index >= 0 && c.index < total ? c.index : 0;
    let m = this._messages.get(f.id);
    if (m && m.final && f.edit !== true && index === 0) {
      // M2: nothing follows a final version, so this is a new message under a reused id (an
      // agent restarted with its counter, say). It gets a key, and a bubble, of its own.
      this._messages.delete(f.id);
      m = { gen: m.gen + 1 };
    }
    if (!m || !m.chunks) {
      m = { text: '', prev: '', chunks: [], total, version: 0, final: false, gen: m ? m.gen : 0 };
      this._messages.set(f.id, m);
      this._trimMessages();
    }
    if (index === 0 || total !== m.total) {
      m.prev = m.text; // shown until the new version covers it
      m.chunks = [];
      m.total = total;
      m.version++;
    }
    m.chunks[index] = f.text;
    let prefix = '';
    let have = 0;
    while (have < m.total && m.chunks[have] !== undefined) prefix += m.chunks[have++];
    const complete = have === m.total;
    m.text = complete ? prefix : prefix + m.prev.slice(prefix.length);
    m.final = complete && (f.final === true || (f.final === undefined && !f.edit));
    this._emit('message', {
      id: f.id,
      key: m.gen ? `${f.id}#${m.gen}` : f.id,
      text: m.text,
      final: m.final,
      edit: f.edit === true,
      complete,
      version: m.version,
      chunk: { index, total },
      seq: Number.isInteger(f.seq) ? f.seq : null,
    });
    if (complete) this._kept(f.seq); // all chunks of a version carry its seq (L57)
  }

  _trimMessages() {
    if (this._messages.size <= 500) return;
    for (const [id, m] of this._messages) {
      if (m.final) this._messages.delete(id);
      if (this._messages.size <= 400) break;
    }
  }

  _onMedia(f) {
    const bad = (reason) => this._emit('invalid', { reason, frame: { t: 'media', id: f.id } });
    if (typeof f.id !== 'string' || !f.id) return bad('media without id');
    const kind = DOWNLOAD_KINDS.includes(lower(f.kind)) ? lower(f.kind) : 'document';
    const meta = {
      id: f.id,
      kind,
      mime: typeof f.mime === 'string' ? f.mime : '',
      filename: typeof f.filename === 'string' ? f.filename : '',
      caption: typeof f.caption === 'string' ? f.caption : '',
      size: Number.isInteger(f.size) && f.size >= 0 ? f.size : 0,
      replyTo: typeof f.reply_to === 'string' ? f.reply_to : null,
      seq: Number.isInteger(f.seq) ? f.seq : null,
    };
    if (typeof f.data !== 'string') {
      // A link, or (replayed from a journal, L58) a file whose bytes the gateway no longer
      // holds: its metadata alone.
      this._downloads.delete(f.id);
      this._emit('media', { ...meta, url: typeof f.url === 'string' ? f.url : null, blob: null });
      return this._kept(f.seq);
    }
    const parts = Number.isInteger(f.parts) ? f.parts : 1;
    const part = Number.isInteger(f.part) ? f.part : 0;
    if (parts < 1 || parts > MAX_MEDIA_PARTS || part < 0 || part >= parts) return bad('bad part/parts');
    let d = this._downloads.get(f.id);
    if (!d || d.parts.length !== parts) {
      d = { meta, parts: new Array(parts), got: 0, bytes: 0, touched: 0 };
      this._downloads.set(f.id, d);
    }
    d.touched = Date.now();
    if (d.parts[part] === undefined) {
      let bytes;
      try {
        bytes = base64ToBytes(f.data);
      } catch {
        this._downloads.delete(f.id);
        return bad('invalid base64');
      }
      d.bytes += bytes.length;
      if (d.bytes > MAX_MEDIA_BYTES) {
        this._downloads.delete(f.id);
        return bad('media over 8 MiB');
      }
      d.parts[part] = bytes;
      d.got++;
    }
    this._emit('mediaprogress', { ...d.meta, received: d.bytes, part, parts, got: d.got });
    if (d.got === parts) {
      this._downloads.delete(f.id);
      const blob = new Blob(d.parts, { type: d.meta.mime || 'application/octet-stream' });
      this._emit('media', { ...d.meta, size: blob.size, blob, url: null });
      this._kept(d.meta.seq);
    }
    // Downloads stalled for 2 minutes are dropped (like the gateway's U5).
    for (const [id, x] of this._downloads) if (Date.now() - x.touched > 120000) this._downloads.delete(id);
  }

  _onPrompt(f) {
    const card = validateCard(f);
    if (!card) {
      this._emit('invalid', { reason: 'bad prompt card', frame: { t: 'prompt', id: f.id } });
      return this._kept(f.seq); // nothing more will come of this frame
    }
    let old = this.prompts.get(card.id);
    if (old && old.state !== 'open') old = null; // a closed card's id used again: a new card
    // An open card's id used again for another card (its closing lost to a restart): a new
    // card too, never the old one's deadline, answer or text.
    if (old && !sameCard(old, card)) old = null;
    if (old) {
      // H5: open cards are sent again after a reconnect; keep the earlier deadline and answer.
      card.expiresAt = Math.min(card.expiresAt, old.expiresAt);
      card.answer = old.answer;
    }
    this.prompts.set(card.id, card);
    if (this.prompts.size > 200) {
      for (const [id, c] of this.prompts) if (c.state !== 'open' && this.prompts.size > 150) this.prompts.delete(id);
    }
    this._emit('prompt', { card, repeat: !!old, seq: Number.isInteger(f.seq) ? f.seq : null });
    // Kept once the application has had the card (docs/sdk.md): a bot that crashes in its
    // handler sees it again after a restart, since an open card at or before `after` is not
    // sent again (L58).
    this._kept(f.seq);
  }

  _onPromptDone(f) {
    if (typeof f.id !== 'string') return;
    const card = this.prompts.get(f.id);
    const optionId = typeof f.option_id === 'string' ? f.option_id.toLowerCase() : null;
    const expired = f.expired === true;
    let label = null;
    if (card) {
      const opt = optionId && card.options.find((o) => o.id === optionId);
      label = opt ? opt.label : optionId;
      if (card.state === 'open') {
        card.state = expired ? 'expired' : 'done';
        card.result = { optionId, expired, label };
      }
    }
    this._emit('promptdone', { id: f.id, optionId, expired, label, card: card || null, seq: Number.isInteger(f.seq) ? f.seq : null });
    this._kept(f.seq);
  }

  // ---- outgoing ---------------------------------------------------------------------

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _queue(e) {
    e.conn = 0;
    e.done = false;
    e.confirmed = false;
    e.activeAt = 0; // the last send or upload progress: the re-send window counts from it
    this._outbox.push(e);
    this._emit('queued', { id: e.id, type: e.type, online: this._isReady });
    this._pump();
    return e.id;
  }

  _remove(e) {
    const i = this._outbox.indexOf(e);
    if (i >= 0) this._outbox.splice(i, 1);
  }

  /** Ids of messages not yet confirmed by the gateway, in order. */
  get pending() {
    return this._outbox.filter((e) => !e.confirmed).map((e) => e.id);
  }

  // Sends what this connection has not carried yet, in order, one entry at a time (the
  // per-device upload buffer is 8 MiB, so files never interleave).
  async _pump() {
    if (this._pumping) return;
    this._pumping = true;
    try {
      while (this._isReady) {
        const conn = this._conn;
        const e = this._outbox.find((x) => !x.confirmed && x.conn !== conn);
        if (!e) break;
        e.conn = conn;
        e.done = false;
        e.activeAt = Date.now();
        let ok;
        try {
          ok = await this._transmit(e, conn);
        } catch (err) {
          this._remove(e);
          this._emit('rejected', { id: e.id, type: e.type, code: err.code || 'read_failed', message: String(err.message) });
          continue;
        }
        if (!ok || conn !== this._conn) break; // lost mid-way: sent again after the next ready
        if (e.rejected || e.confirmed) continue; // `received` may beat the last chunk's drain
        e.done = true;
        // With a journal, `received` confirms it (on disk); otherwise the pong does.
        e.ackSeq = this.journal && RECEIVED_TYPES.includes(e.type) ? Infinity : this._ping();
        this._emit('sent', { id: e.id, type: e.type });
      }
    } finally {
      this._pumping = false;
    }
    if (this._isReady && this._outbox.some((x) => !x.confirmed && x.conn !== this._conn)) this._pump();
  }

  async _transmit(e, conn) {
    if (e.type !== 'media' && e.type !== 'audio') return this._sendRaw(e.frame);
    if (e.type === 'audio') {
      const data = bytesToBase64(new Uint8Array(await e.blob.arrayBuffer()));
      if (conn !== this._conn) return false;
      const frame = { t: 'audio', id: e.id, format: e.format, data };
      if (e.text) frame.text = e.text;
      return this._sendRaw(frame);
    }
    // U1: UPLOAD_PART_BYTES of raw bytes per chunk, the same id on every chunk.
    const size = e.blob.size;
    const step = Math.max(UPLOAD_PART_BYTES, Math.ceil(size / MAX_MEDIA_PARTS));
    const parts = Math.max(1, Math.ceil(size / step));
    const frameBytes = Math.ceil(size / 3) * 4 + parts * 300;
    let queued = 0;
    this._progress(e, 0, size);
    for (let part = 0; part < parts; part++) {
      const raw = new Uint8Array(await e.blob.slice(part * step, (part + 1) * step).arrayBuffer());
      if (conn !== this._conn || e.rejected) return false;
      const frame = { t: 'media', id: e.id, kind: e.kind, mime: e.mime, filename: e.filename, data: bytesToBase64(raw), part, parts };
      if (e.caption) frame.caption = e.caption;
      const text = JSON.stringify(frame);
      const ws = this._ws;
      if (!ws || ws.readyState !== 1) return false;
      ws.send(text);
      queued += text.length;
      // Progress follows the socket's send buffer; the next chunk waits for it to drain.
      let last = -1;
      for (;;) {
        if (conn !== this._conn || e.rejected) return false;
        const sent = Math.max(0, queued - ws.bufferedAmount);
        if (sent > last) {
          last = sent;
          e.activeAt = Date.now();
          this._alive();
          this._progress(e, Math.min(size, Math.round((sent / frameBytes) * size)), size);
        }
        if (ws.bufferedAmount < 256 * 1024) break;
        await sleep(40);
      }
    }
    return true;
  }

  // The send buffer went down since the last look: bytes are leaving, so the connection
  // lives even when the pong is stuck behind a big upload on a slow link.
  _alive() {
    const b = this._ws ? this._ws.bufferedAmount : 0;
    if (b < this._lastBuffered) this._lastRx = Math.max(this._lastRx, Date.now());
    this._lastBuffered = b;
  }

  _progress(e, loaded, total) {
    // 100 % only once the gateway has confirmed the file (a pong after its last chunk).
    const percent = total ? Math.floor((loaded / total) * 100) : 100;
    const p = e.confirmed ? 100 : Math.min(99, percent);
    const detail = { id: e.id, loaded: e.confirmed ? total : loaded, total, percent: p };
    if (e.onProgress) try { e.onProgress(detail); } catch { /* the caller's bug */ }
    this._emit('uploadprogress', detail);
  }

  /**
   * Sends a text message (queued while offline). Returns its id.
   * Throws HermesError bad_frame (blank) or too_big (over 12000 characters, G1).
   */
  sendText(text, { id } = {}) {
    if (isBlank(text)) throw new HermesError('bad_frame', 'text is empty');
    if (charCount(text) > this.maxTextChars) throw new HermesError('too_big', `text is over ${this.maxTextChars} characters`);
    id = checkId(id) || newId('m');
    return this._queue({ id, type: 'text', frame: { t: 'text', id, text } });
  }

  /**
   * Sends a file (a Blob or File) as `media`, in U1 chunks. Throws too_big over 8 MiB before
   * anything is sent. Options: kind (from the MIME type by default), mime, filename, caption,
   * id, onProgress({id, loaded, total, percent}). Returns the id.
   */
  sendFile(blob, opts = {}) {
    if (!blob || typeof blob.size !== 'number' || typeof blob.slice !== 'function') throw new HermesError('bad_frame', 'not a file');
    if (blob.size > this.maxMediaBytes) throw new HermesError('too_big', `file is over ${this.maxMediaBytes} bytes`);
    if (blob.size === 0) throw new HermesError('bad_frame', 'file is empty');
    const mime = opts.mime ?? blob.type ?? '';
    const kind = opts.kind || kindFromMime(mime);
    if (!UPLOAD_KINDS.includes(kind)) throw new HermesError('unsupported_frame', 'kind must be image, video, document or audio');
    const caption = typeof opts.caption === 'string' && !isBlank(opts.caption) ? opts.caption : '';
    if (caption && charCount(caption) > this.maxTextChars) throw new HermesError('too_big', 'caption is too long');
    const filename = cutFilename(String(opts.filename ?? blob.name ?? 'file'));
    const id = checkId(opts.id) || newId('f');
    return this._queue({ id, type: 'media', blob, size: blob.size, kind, mime, filename, caption, onProgress: opts.onProgress });
  }

  /** Sends a voice recording (`audio` frame; format "wav" or "ogg"; ≤ 8 MiB). Returns the id. */
  sendAudio(blob, { format = 'wav', text = '', id } = {}) {
    if (!(blob instanceof Blob)) blob = new Blob([blob]);
    if (blob.size > MAX_AUDIO_BYTES) throw new HermesError('too_big', 'recording is over 8 MiB');
    if (blob.size === 0) throw new HermesError('bad_frame', 'recording is empty');
    format = lower(format);
    if (format !== 'wav' && format !== 'ogg') throw new HermesError('unsupported_frame', 'format must be wav or ogg');
    if (!isBlank(text) && charCount(text) > this.maxTextChars) throw new HermesError('too_big', 'text is too long');
    id = checkId(id) || newId('a');
    return this._queue({ id, type: 'audio', blob, format, text: isBlank(text) ? '' : text });
  }

  /**
   * Answers a card. `optionId` must be one of its options; clarify's `other` needs `text`
   * (P3). Throws HermesError prompt_closed / bad_frame. Returns the frame id.
   */
  answer(promptId, optionId, text = '') {
    const card = this.prompts.get(promptId);
    optionId = lower(optionId);
    if (card) {
      if (card.state !== 'open') throw new HermesError('prompt_closed', 'the card is closed');
      if (optionId && !card.options.some((o) => o.id === optionId)) throw new HermesError('bad_frame', 'not an option of this card');
      if (card.kind === 'clarify' && optionId === 'other' && isBlank(text)) throw new HermesError('bad_frame', 'clarify needs text');
    }
    if (!optionId && isBlank(text)) throw new HermesError('bad_frame', 'an option or a text is needed');
    if (!isBlank(text) && charCount(text) > this.maxTextChars) throw new HermesError('too_big', 'text is too long');
    const frame = { t: 'prompt', id: newId('r'), prompt_id: promptId };
    if (optionId) frame.option_id = optionId;
    if (!isBlank(text)) frame.text = text;
    if (card) card.answer = { optionId, text };
    return this._queue({ id: frame.id, type: 'prompt', frame, promptId });
  }

  /** Tells the agent the user is typing; sent at most once every 2 s, and only online. */
  typing() {
    const now = Date.now();
    if (!this._isReady || now - this._lastTyping < this.opts.typingIntervalMs) return false;
    this._lastTyping = now;
    return this._sendRaw({ t: 'typing', id: newId('t') });
  }

  /** Tells the gateway a message was shown (`ack`; the gateway ignores it). */
  ack(id) {
    if (this._isReady && typeof id === 'string') this._sendRaw({ t: 'ack', id });
  }

  // ---- requests: a frame answered by one frame with its id, or an `error` with it --------

  // Not queued like messages: a request is about this moment (the user pressed a button),
  // so offline it fails at once, and a lost connection or no answer in time rejects it.
  _request(frame, answer) {
    if (!this._isReady) return Promise.reject(new HermesError('offline', 'not connected to the gateway'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => this._settle(frame.id, new HermesError('timeout', `the gateway did not answer ${frame.t}`)),
        this.opts.requestTimeoutMs,
      );
      this._requests.set(frame.id, { type: frame.t, answer, resolve, reject, timer });
      if (!this._sendRaw(frame)) this._settle(frame.id, new HermesError('offline', 'not connected to the gateway'));
    });
  }

  _settle(id, err, frame) {
    const r = this._requests.get(id);
    if (!r) return;
    this._requests.delete(id);
    clearTimeout(r.timer);
    if (err) r.reject(err);
    else r.resolve(frame);
  }

  /**
   * The gateway's Web Push public key (VAPID, base64url), or '' when it sends no pushes
   * (push off, or a gateway older than the push extension).
   */
  get webPushKey() {
    const push = this.capabilities.push;
    const key = push && push.webpush && push.webpush.vapid_public_key;
    return typeof key === 'string' ? key : '';
  }

  /**
   * Which buttons the gateway puts on a card's notification (issue 25,
   * `capabilities.push.actions`): 'safe', 'all' or 'off'; '' when it does not say (push off,
   * or a gateway older than answers from notifications).
   */
  get notifyActions() {
    const push = this.capabilities.push;
    const mode = push && push.actions;
    return ['safe', 'all', 'off'].includes(mode) ? mode : '';
  }

  /**
   * Registers a Web Push subscription (a PushSubscription, or its toJSON()) for this device:
   * `push_subscribe`, answered `push_subscribed`. `appUrl` is the page's address, which the
   * gateway puts in a notification's link. Keys go as base64url without padding. Resolves
   * with the answer frame; rejects with a HermesError (the gateway's code: forbidden,
   * bad_frame…; or offline, timeout).
   */
  pushSubscribe(subscription, appUrl) {
    const s = subscription && typeof subscription.toJSON === 'function' ? subscription.toJSON() : subscription;
    const endpoint = s && s.endpoint;
    if (typeof endpoint !== 'string' || !/^https:\/\//i.test(endpoint)) {
      return Promise.reject(new HermesError('bad_frame', 'the subscription has no https endpoint'));
    }
    let keys;
    try {
      // A PushSubscription's toJSON() gives `keys`; without one, its getKey() does.
      const byGetKey = subscription && typeof subscription.getKey === 'function'
        ? { p256dh: subscription.getKey('p256dh'), auth: subscription.getKey('auth') } : {};
      const k = (s.keys && typeof s.keys === 'object' && s.keys) || byGetKey;
      keys = { p256dh: keyToBase64Url(k.p256dh), auth: keyToBase64Url(k.auth) };
    } catch (e) {
      return Promise.reject(e instanceof HermesError ? e : new HermesError('bad_frame', 'a subscription key is not base64url'));
    }
    const frame = { t: 'push_subscribe', id: newId('ps'), subscription: { endpoint, keys } };
    if (typeof appUrl === 'string' && appUrl) frame.app_url = appUrl;
    return this._request(frame, 'push_subscribed');
  }

  /** Forgets this device's subscription at the gateway: `push_unsubscribe` → `push_unsubscribed`. */
  pushUnsubscribe() {
    return this._request({ t: 'push_unsubscribe', id: newId('pu') }, 'push_unsubscribed');
  }

  /**
   * Asks the gateway to push a test notification to this device: `push_test` → `push_sent`.
   * A refusal's message names the push service's answer (its HTTP status).
   */
  pushTest() {
    return this._request({ t: 'push_test', id: newId('pt') }, 'push_sent');
  }

  /** The gateway keeps history (L56: `ready.capabilities.history`): history() may be asked. */
  get hasHistory() {
    const h = this.capabilities.history;
    return !!h && typeof h === 'object';
  }

  /**
   * A page of this device's journal (L59): up to `limit` (1 to 200, default 50) entries with
   * seq below `before` (the newest without it). Resolves to `{items, more}`: items oldest
   * first, each a whole frame with its `seq` (`message` with its whole text; the person's own
   * as `text`/`audio`/`media` with `from: "user"`; files without `data`; cards as `prompt`,
   * closed ones with `closed`); `more` when older entries remain. Rejects with a HermesError:
   * `unsupported_frame` when the gateway keeps no history, `offline`, `timeout`.
   */
  history(before, limit) {
    const frame = { t: 'history', id: newId('hi') };
    if (before !== undefined && before !== null) {
      if (!Number.isInteger(before) || before < 0) return Promise.reject(new HermesError('bad_frame', 'before must be a seq'));
      frame.before = before;
    }
    if (limit !== undefined && limit !== null) {
      if (!Number.isInteger(limit) || limit < 1) return Promise.reject(new HermesError('bad_frame', 'limit must be at least 1'));
      frame.limit = Math.min(limit, HISTORY_MAX_LIMIT);
    }
    if (this._isReady && !this.hasHistory) {
      return Promise.reject(new HermesError('unsupported_frame', 'this gateway keeps no history'));
    }
    return this._request(frame, 'history').then((f) => ({
      items: Array.isArray(f.items) ? f.items.filter((i) => i && typeof i === 'object' && !Array.isArray(i)) : [],
      more: f.more === true,
    }));
  }

  /**
   * Asks the gateway to forget this device (`forget` → `forgotten`): its journal (open cards
   * excepted), what it holds for it and its push subscriptions (L60). The seq goes on.
   */
  forget() {
    return this._request({ t: 'forget', id: newId('fg') }, 'forgotten');
  }

  /**
   * The paired devices (issue 26; owner connections only): `devices` → `devices`. Resolves to
   * its items, ordered by id: `{id, name, platform, paired_at, last_seen, online, push,
   * owner}`, times in unix milliseconds, `last_seen` null when not seen since pairing. Rejects
   * with a HermesError: `forbidden` (not an owner's connection), `offline`, `timeout`.
   */
  devices() {
    return this._request({ t: 'devices', id: newId('dv') }, 'devices').then((f) =>
      Array.isArray(f.items) ? f.items.filter((i) => i && typeof i === 'object' && typeof i.id === 'string' && i.id) : []);
  }

  /**
   * Revokes a paired device (owner connections only): `revoke` → `revoked`, sent once the
   * revocation is on the gateway's disk; the device's live connections are closed with a
   * fatal `auth_failed`. Rejects with a HermesError: `bad_frame` (no paired device with that
   * id), `forbidden`, `offline`, `timeout`.
   */
  revoke(deviceId) {
    let device;
    try {
      device = checkId(deviceId);
    } catch (e) {
      return Promise.reject(e);
    }
    if (!device) return Promise.reject(new HermesError('bad_frame', 'which device?'));
    return this._request({ t: 'revoke', id: newId('rv'), device }, 'revoked').then(() => undefined);
  }
}
