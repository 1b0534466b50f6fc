// The service worker of the chat app (issue 18): it keeps the app shell so the app opens with
// no network, and it shows push notifications. The gateway writes the build's version (a
// digest of every other web file) over the placeholder below, so a changed file makes a new
// sw.js, a new cache, and the old cache goes on activate.
const BUILD = '__HERMES_BUILD__';
const CACHE_PREFIX = 'hermes-shell-';
const CACHE = CACHE_PREFIX + BUILD;

// Only these same-origin paths are ever cached. Never /ws, /agent, /healthz, media, blob:
// or data: URLs: they are live or private, and a stale copy would lie.
const SHELL = [
  '/', '/app.js', '/app.css', '/protocol.js', '/push.js', '/voice.js', '/devices.js', '/markdown.js', '/history.js',
  '/vendor/markdown-it.min.js', '/icon.svg', '/manifest.webmanifest',
  '/icons/icon-192.png', '/icons/icon-512.png', '/icons/maskable-512.png',
  '/avatar/', '/avatar/avatar.css', '/avatar/avatar.js',
];
const SHELL_PATHS = new Set(SHELL);
// A request waits this long for the network before the cached copy is used: a phone on a
// dead Wi-Fi can hang a request for a minute.
const NAVIGATION_TIMEOUT_MS = 4000;

self.addEventListener('install', (event) => {
  // cache: 'reload' skips the HTTP cache, so this version's cache holds this version's files.
  event.waitUntil(
    caches.open(CACHE)
      .then((cache) => cache.addAll(SHELL.map((p) => new Request(p, { cache: 'reload' }))))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(CACHE_PREFIX) && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin || !SHELL_PATHS.has(url.pathname)) return;
  event.respondWith(networkFirst(req, url.pathname));
});

// Every shell file: the network first, so that a new build's page never runs with the
// previous build's scripts (an ETag makes the check a 304); this build's cached copy when
// the network fails, is too slow, or a proxy in front answers with an error page (a 5xx
// from Caddy or `tailscale serve` while the gateway is down).
async function networkFirst(req, path) {
  const cache = await caches.open(CACHE);
  try {
    const res = await withTimeout(fetch(req), NAVIGATION_TIMEOUT_MS);
    if (res.ok) await cache.put(path, res.clone());
    if (res.status >= 500) {
      const hit = await cache.match(path);
      if (hit) return hit;
    }
    return res;
  } catch (err) {
    const hit = await cache.match(path);
    if (hit) return hit;
    throw err;
  }
}

function withTimeout(promise, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout')), ms);
    promise.then((v) => { clearTimeout(timer); resolve(v); }, (e) => { clearTimeout(timer); reject(e); });
  });
}

// ---- notifications ------------------------------------------------------------------------

const KINDS = ['card', 'reply', 'deliver', 'test'];
// How long a button's answer may take before the card is opened in the app instead.
const ANSWER_TIMEOUT_MS = 5000;

/**
 * What a push payload asks to show: {title, body, tag, actions, silent, data}, with
 * data = {kind, id, navigate, tag, answer}. The gateway sends declarative Web Push
 * (`"web_push": 8030` with `notification`), which iOS 18.4+ shows without running this
 * worker; a plain {title, body} is taken too, and anything unreadable still gives a generic
 * notification.
 */
function readPush(data) {
  let p = null;
  let text = '';
  try {
    p = data ? data.json() : null;
  } catch {
    try {
      text = data ? data.text().slice(0, 200) : ''; // a plain-text push: shown as it is
    } catch { /* nothing readable */ }
  }
  if (!p || typeof p !== 'object' || Array.isArray(p)) p = {};
  const n = p.web_push === 8030 && p.notification && typeof p.notification === 'object' ? p.notification : p;
  const h = p.hermes && typeof p.hermes === 'object' ? p.hermes : {};
  const str = (v) => (typeof v === 'string' ? v : '');
  const navigate = str(n.navigate);
  // What to bring into view: the gateway says it in `hermes`; a sender that only gives a
  // declarative `navigate` ending in #card=ID or #message=ID says it there.
  let item = { kind: KINDS.includes(h.kind) ? h.kind : '', id: str(h.id) };
  if (!item.id) item = itemOf(navigate) || item;
  // A card's buttons (issue 25). Two at most: Chromium shows no more (Notification.maxActions),
  // and the gateway never sends more. Each action's own `navigate` is for a browser that
  // runs no worker; here a press POSTs its token instead (answerFromNotification).
  const actions = (Array.isArray(n.actions) ? n.actions : [])
    .filter((a) => a && typeof a === 'object' && str(a.action) && str(a.title))
    .slice(0, 2)
    .map((a) => ({ action: a.action, title: a.title }));
  return {
    title: str(n.title) || 'Hermes',
    body: str(n.body) || (str(n.title) ? '' : text || 'Something new from Hermes.'),
    tag: str(n.tag),
    actions,
    silent: n.silent === true, // a card's outcome replacing its notification: no sound
    data: { ...item, navigate, tag: str(n.tag), title: str(n.title), answer: readAnswer(h.answer) },
  };
}

// `hermes.answer` of a card's push, or null: where its buttons answer, a token per option,
// the line to show once each is applied, and when the card expires (unix ms).
function readAnswer(a) {
  if (!a || typeof a !== 'object' || typeof a.url !== 'string') return null;
  const strings = (o) => (o && typeof o === 'object' && !Array.isArray(o)
    ? Object.fromEntries(Object.entries(o).filter(([, v]) => typeof v === 'string' && v))
    : {});
  const tokens = strings(a.tokens);
  if (!Object.keys(tokens).length) return null;
  return { url: a.url, tokens, done: strings(a.done), expires: Number.isFinite(a.expires) ? a.expires : null };
}

// {kind, id} from an address ending in #card=ID or #message=ID, else null.
function itemOf(address) {
  const m = /#(card|message)=([^&#]+)$/.exec(address);
  if (!m) return null;
  try {
    return { kind: m[1] === 'card' ? 'card' : 'reply', id: decodeURIComponent(m[2]) };
  } catch {
    return null;
  }
}

self.addEventListener('push', (event) => {
  // Always a notification, inside waitUntil: Safari revokes a subscription whose pushes
  // show nothing.
  const n = readPush(event.data);
  event.waitUntil(show(n.title, n.body, n.tag, n.actions, n.silent, n.data));
});

// renotify false: a newer notification of the same card (its outcome) replaces the old one
// without buzzing again; `silent` quiets even a first one. Safari shows no buttons: on
// iPhone and iPad a card's notification is only tapped, which opens the card.
function show(title, body, tag, actions, silent, data) {
  const options = { body, icon: '/icons/icon-192.png', badge: '/icons/icon-192.png', data, silent, renotify: false };
  if (tag) options.tag = tag; // a newer notification about the same thing replaces it
  if (actions.length) options.actions = actions;
  return self.registration.showNotification(title, options);
}

// The page that shows what the notification is about: its own `navigate` when it is on this
// origin, else the app with #card=ID / #message=ID.
function targetUrl(d) {
  try {
    const nav = d.navigate && new URL(d.navigate, self.registration.scope);
    if (nav && nav.origin === self.location.origin) return nav.href;
  } catch { /* not a URL: the scope below */ }
  const url = new URL(self.registration.scope);
  if (d.id && d.kind === 'card') url.hash = 'card=' + encodeURIComponent(d.id);
  else if (d.id && (d.kind === 'reply' || d.kind === 'deliver')) url.hash = 'message=' + encodeURIComponent(d.id);
  return url.href;
}

async function openFromNotification(d) {
  const scope = new URL(self.registration.scope);
  // Top-level windows only: the avatar page in the chat's iframe is a window client too.
  const all = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const wins = all.filter((c) => c.frameType !== 'nested');
  const win = wins.find((c) => new URL(c.url).pathname === scope.pathname); // the chat, not /avatar/
  if (win) {
    // An open chat brings the card or message into view itself; no reload, no second tab.
    win.postMessage({ type: 'hermes-open', kind: d.kind || '', id: d.id || '' });
    try {
      await win.focus();
    } catch { /* focus is only allowed from a real click */ }
    return;
  }
  await self.clients.openWindow(targetUrl(d));
}

// A press of a card's button (issue 25): POSTs the button's token to the gateway and says on
// the notification how it went, without opening the app. Where that cannot be done or did
// not work (no token, a URL off this origin, a refusal, no network) the card is opened in
// the app instead, so the person can still answer it there. Resolves when done.
async function answerFromNotification(d, action) {
  const a = d.answer;
  const token = a && Object.hasOwn(a.tokens, action) ? a.tokens[action] : '';
  let url = null;
  try {
    url = token && d.id ? new URL(a.url, self.location.href) : null;
  } catch { /* not a URL: opened below */ }
  // Only to this worker's own origin: a push payload must never make it POST elsewhere.
  if (!url || url.origin !== self.location.origin) return openFromNotification(d);
  let status;
  try {
    const res = await fetch(url.href, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt_id: d.id, option_id: action, token }),
      credentials: 'omit', // the token is the whole authority; no cookie goes with it
      redirect: 'error', // never carried on to wherever a proxy in front points
      // A browser lets the worker open a window only for a few seconds after the press.
      signal: AbortSignal.timeout(ANSWER_TIMEOUT_MS),
    });
    status = res.status;
  } catch {
    return notSent(d); // no network, or too slow: the app shows the card when it can
  }
  if (status === 200) return showOutcome(d, a.done[action] || 'Answered');
  if (status === 409) {
    // Closed before this press. The gateway pushes how it closed (L66): if that came while
    // the POST was out (a notification of this card without buttons), it says more than
    // this line and stays.
    const now = d.tag ? await self.registration.getNotifications({ tag: d.tag }) : [];
    if (now.some((n) => !(n.data && n.data.answer))) return;
    return showOutcome(d, a.expires !== null && Date.now() >= a.expires ? 'Expired' : 'Already answered');
  }
  return notSent(d); // 403 (not this device's token), 5xx…: answered in the app
}

// The press did not answer the card: the notification (closed by the press) comes back, so
// that the card is not lost if the app cannot be opened from here (the browser's window
// for that may have passed), and the app is opened on it.
async function notSent(d) {
  // The answer may have gone through after all (an answer lost on the way back): the
  // gateway's push of how the card closed (a notification of it without buttons) says
  // more than this, and stays.
  const now = d.tag ? await self.registration.getNotifications({ tag: d.tag }) : [];
  if (now.some((n) => !(n.data && n.data.answer))) return;
  await show(d.title || 'Hermes', 'Not sent: tap to open the card.', d.tag, [], true, { ...d, answer: null });
  try {
    await openFromNotification(d);
  } catch { /* not allowed any more: the notification above opens it */ }
}

// The card's notification replaced by one quiet line, without buttons; a tap opens the card.
function showOutcome(d, line) {
  return show(line, '', d.tag, [], true, { ...d, answer: null }); // its tokens are spent
}

self.addEventListener('notificationclick', (event) => {
  event.notification.close(); // also stops a second press of a button while the first is out
  const d = event.notification.data || {};
  event.waitUntil(event.action ? answerFromNotification(d, event.action) : openFromNotification(d));
});
