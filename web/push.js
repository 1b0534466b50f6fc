// Install and notifications (issue 18): registers the service worker, runs the
// notifications control, and brings a card or message into view when a notification was
// tapped. The protocol side (push_subscribe, push_test, push_unsubscribe) is HermesClient's;
// this file is the page's.
import { base64UrlToBytes } from '/protocol.js';

const KEY_PUSH = 'hermes.push'; // the endpoint this browser registered at the gateway
const KEY_HIDDEN = 'hermes.push.hidden'; // the owner put the notifications bar away ("Not now")
const FIND_WAIT_MS = 30000; // how long a tapped card may take to arrive after `ready`
const HIGHLIGHT_MS = 2500;

/** The facts push depends on, read from the browser (`explainNoPush` takes them). */
export function browserEnv() {
  const nav = typeof navigator !== 'undefined' ? navigator : {};
  const standalone = nav.standalone === true ||
    (typeof matchMedia === 'function' && matchMedia('(display-mode: standalone)').matches);
  return {
    secure: globalThis.isSecureContext === true,
    userAgent: String(nav.userAgent || ''),
    touchPoints: Number(nav.maxTouchPoints) || 0,
    standalone,
    supported: 'serviceWorker' in nav && typeof PushManager !== 'undefined' && typeof Notification !== 'undefined',
    permission: typeof Notification !== 'undefined' ? Notification.permission : 'default',
  };
}

function isIOS(env) {
  // iPadOS says "Macintosh"; a Mac has no touch screen.
  return /iPhone|iPad|iPod/.test(env.userAgent) || (/Macintosh/.test(env.userAgent) && env.touchPoints > 1);
}

/**
 * Why notifications cannot work here, in one sentence, or '' when they can. `vapidKey` is
 * the gateway's key ('' when the gateway sends no pushes; null while not yet known).
 */
export function explainNoPush(env, vapidKey) {
  if (!env.secure) {
    return 'Notifications need a secure page: open the chat over https (or on localhost), not plain http on the network.';
  }
  if (isIOS(env) && !env.standalone) {
    return 'On iPhone and iPad, notifications work only in the app on the Home Screen: tap Share, then “Add to Home Screen”, and open Hermes from there.';
  }
  if (!env.supported) return 'This browser cannot receive push notifications.';
  if (env.permission === 'denied') {
    return 'Notifications are blocked for this site: allow them in the browser’s site settings, then try again.';
  }
  if (vapidKey === '') return 'Push is not available from this gateway (it is turned off there, or the gateway is older).';
  return '';
}

/**
 * Which buttons a card's notification will have, in one sentence, from the gateway's
 * `ready.capabilities.push.actions` (issue 25); '' when it does not say. The owner should
 * know before turning notifications on that, with `all`, a locked phone can approve.
 * Safari shows no buttons at all: on an iPhone or iPad every card's notification is only
 * tapped, which opens the card, and the sentence says so. All buttons may also be fewer
 * than the sentence says: a command cut short on the lock screen is never approvable there.
 */
export function explainActions(mode, env) {
  if (mode && env && isIOS(env)) return 'On iPhone and iPad notifications have no buttons: tap one to open the card.';
  if (mode === 'safe') return 'Notifications can deny a command or cancel a confirmation; approving needs the app.';
  if (mode === 'all') {
    return 'Notifications can deny or cancel, and also approve once, confirm, or pick one of two answers: anyone holding your phone can press them.';
  }
  if (mode === 'off') return 'Notifications have no buttons; tap one to open the card.';
  return '';
}

/** Registers /sw.js for the whole app; where it cannot (plain http), the app works online. */
export function registerServiceWorker() {
  try {
    if (typeof navigator === 'undefined' || !('serviceWorker' in navigator) || !globalThis.isSecureContext) return null;
    return navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch(() => null);
  } catch {
    return null; // some browsers throw at once when the site's storage is blocked
  }
}

function stored(key) {
  return {
    get: () => { try { return localStorage.getItem(key); } catch { return null; } },
    set: (v) => { try { localStorage.setItem(key, v); } catch { /* in memory only */ } },
    del: () => { try { localStorage.removeItem(key); } catch { /* nothing */ } },
  };
}
const store = stored(KEY_PUSH);
const hiddenStore = stored(KEY_HIDDEN);

async function registration() {
  const reg = await Promise.race([
    navigator.serviceWorker.ready,
    new Promise((_, reject) => setTimeout(() => reject(new Error('the service worker did not start')), 10000)),
  ]);
  return reg;
}

function sameKey(sub, key) {
  const have = sub.options && sub.options.applicationServerKey;
  if (!have) return true; // not told: keep it
  const a = new Uint8Array(have);
  return a.length === key.length && a.every((b, i) => b === key[i]);
}

// A subscription for this gateway's key: the existing one, or a new one (a key changed at
// the gateway makes the old subscription useless).
async function subscribe(vapidKey) {
  const reg = await registration();
  const key = base64UrlToBytes(vapidKey);
  let sub = await reg.pushManager.getSubscription();
  if (sub && !sameKey(sub, key)) {
    await sub.unsubscribe();
    sub = null;
  }
  return sub || reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
}

// The address the gateway links a notification to: this page, without its fragment.
const appUrl = () => location.origin + location.pathname;

// Subscribes this browser and registers it at the gateway; returns the endpoint.
async function subscribeAtGateway(client) {
  if (!client || !client.online) throw new Error('connect to the gateway first');
  const sub = await subscribe(client.webPushKey);
  await client.pushSubscribe(sub, appUrl()); // toJSON(), or `keys`, or getKey(): all taken
  return sub.endpoint;
}

async function currentSubscription() {
  if (!browserEnv().supported || !globalThis.isSecureContext) return null;
  try {
    const reg = await navigator.serviceWorker.getRegistration('/');
    return reg ? await reg.pushManager.getSubscription() : null;
  } catch {
    return null;
  }
}

function gatewayError(e) {
  const what = e && e.code ? `${e.code}${e.message && e.message !== e.code ? ': ' + e.message : ''}` : String((e && e.message) || e);
  return `Notifications: ${what}`;
}

// `why` is explainNoPush's sentence; a subscription that is on can still be turned off.
// `note` is explainActions' sentence, shown only where push can work.
function renderControl(ui, { why, on, busy, note }) {
  const state = why ? 'unavailable' : on ? 'on' : 'off';
  const label = { on: 'Notifications: on', off: 'Notifications: off', unavailable: 'Notifications: not available' }[state];
  ui.button.dataset.state = state;
  ui.button.setAttribute('aria-label', label);
  ui.button.title = label;
  ui.state.dataset.state = state;
  ui.state.textContent = why || (on ? 'Notifications are on for this browser.' : 'Get a notification for cards and replies while the app is closed.');
  ui.note.textContent = why ? '' : note;
  ui.note.hidden = !ui.note.textContent;
  ui.toggle.hidden = !!why && !on;
  ui.toggle.textContent = on ? 'Turn off notifications' : 'Turn on notifications';
  ui.toggle.disabled = busy;
  ui.test.hidden = !on;
  ui.test.disabled = busy;
  return state;
}

/**
 * The notifications control on the chat screen. #push-panel holds the state sentence or the
 * one-sentence reason why push cannot work here (#push-state), on/off (#push-toggle), a
 * test (#push-test) and "Not now" (#push-hide). It shows by itself while notifications are
 * off, until put away; once they are on (or put away) the bell (#push-button) in the header
 * brings it back. Only one of the two is visible at a time. `getClient()` gives the current
 * HermesClient or null; `notice(text)` shows a page notice.
 */
export function initPush({ getClient, notice }) {
  const $ = (id) => document.getElementById(id);
  const ui = {
    button: $('push-button'), panel: $('push-panel'), state: $('push-state'), note: $('push-note'),
    toggle: $('push-toggle'), test: $('push-test'), hide: $('push-hide'),
  };
  let on = false;
  let busy = false;
  let visible = false; // the chat screen is showing
  let expanded = null; // the owner's choice on this page; null: by the state

  function render() {
    const client = getClient();
    const ready = client && client.ready;
    const why = explainNoPush(browserEnv(), ready ? client.webPushKey : null);
    const state = renderControl(ui, { why, on, busy, note: explainActions(ready ? client.notifyActions : '', browserEnv()) });
    const open = expanded !== null ? expanded : state !== 'on' && hiddenStore.get() !== '1';
    ui.panel.hidden = !visible || !open;
    ui.button.hidden = !visible || open;
    ui.button.setAttribute('aria-expanded', String(!ui.panel.hidden));
  }

  async function run(fn) {
    if (busy) return;
    busy = true;
    render();
    try {
      await fn();
    } catch (e) {
      notice(e && e.name === 'NotAllowedError' ? explainNoPush({ ...browserEnv(), permission: 'denied' }, null) || 'Notifications were not allowed.' : gatewayError(e));
    } finally {
      busy = false;
      render();
    }
  }

  async function turnOn() {
    store.set(await subscribeAtGateway(getClient()));
    on = true;
    expanded = true; // stays open: "Send a test notification" is the next thing to try
  }

  async function turnOff() {
    const client = getClient();
    const sub = await currentSubscription();
    if (sub) await sub.unsubscribe();
    store.del();
    on = false;
    if (client && client.online) await client.pushUnsubscribe();
  }

  ui.button.addEventListener('click', () => {
    expanded = true;
    render();
    ui.toggle.hidden ? ui.hide.focus() : ui.toggle.focus();
  });
  ui.hide.addEventListener('click', () => {
    if (!on) hiddenStore.set('1');
    expanded = false;
    render();
    ui.button.focus();
  });
  ui.toggle.addEventListener('click', () => run(on ? turnOff : turnOn));
  ui.test.addEventListener('click', () => run(async () => {
    await getClient().pushTest();
    notice('A test notification is on its way.', 'info');
  }));

  return {
    render,
    /** The control belongs to the chat screen. */
    show(chatVisible) {
      visible = chatVisible;
      render();
    },
    /**
     * After `ready`: shows the state. A subscription the browser renewed (a new endpoint),
     * or one for a key the gateway no longer has, is registered again.
     */
    async onReady(client) {
      const sub = await currentSubscription();
      const known = store.get();
      on = !!(sub && known);
      render();
      const key = client.webPushKey;
      if (on && key && (sub.endpoint !== known || !sameKey(sub, base64UrlToBytes(key)))) {
        subscribeAtGateway(client).then((endpoint) => store.set(endpoint), () => {});
      }
    },
    /** "Forget this device": the subscription goes, at the gateway too while connected. */
    forget(client) {
      if (client && client.online && store.get()) client.pushUnsubscribe().catch(() => {});
      store.del();
      hiddenStore.del();
      on = false;
      expanded = null;
      currentSubscription().then((sub) => sub && sub.unsubscribe()).catch(() => {});
      render();
    },
  };
}

// ---- opening what a notification was about ---------------------------------------------

function findItem(box, kind, id) {
  for (const n of box.children) {
    if (kind === 'card' ? n.dataset.promptId === id : n.classList.contains('msg') && n.dataset.id === id) return n;
  }
  return null;
}

function reveal(n) {
  n.scrollIntoView({ block: 'center', behavior: 'smooth' });
  n.classList.add('highlight');
  setTimeout(() => n.classList.remove('highlight'), HIGHLIGHT_MS);
}

/**
 * Brings a card or message into view when a notification was tapped: the service worker's
 * {type: 'hermes-open', kind, id} message to an open window, or #card=ID / #message=ID in
 * the address of a window it opened. The card comes from the gateway after `ready`, so it
 * is waited for (FIND_WAIT_MS at most). A card shown from history is closed until the
 * gateway sends it open again (replacing the element): what is found closed is shown at
 * once, and the open card again when it comes.
 */
export function initNotificationOpen(box) {
  let stop = null;
  const isOpen = (n) => n.dataset.state === 'open';
  function open(kind, id) {
    if (stop) stop();
    if (!id) return;
    kind = kind === 'card' ? 'card' : 'message';
    const now = findItem(box, kind, id);
    if (now) reveal(now);
    if (now && (kind === 'message' || isOpen(now))) return;
    let shown = now;
    const obs = new MutationObserver(() => {
      const n = findItem(box, kind, id);
      if (!n || n === shown) return;
      shown = n;
      reveal(n);
      if (kind === 'message' || isOpen(n)) stop();
    });
    const timer = setTimeout(() => stop(), FIND_WAIT_MS);
    stop = () => {
      obs.disconnect();
      clearTimeout(timer);
      stop = null;
    };
    obs.observe(box, { childList: true });
  }
  function fromHash() {
    const m = /^#(card|message)=([^&]+)$/.exec(location.hash);
    if (!m) return;
    history.replaceState(history.state, '', location.pathname + location.search);
    let id;
    try { id = decodeURIComponent(m[2]); } catch { return; }
    open(m[1], id);
  }
  try {
    if (typeof navigator !== 'undefined' && navigator.serviceWorker) {
      navigator.serviceWorker.addEventListener('message', (e) => {
        const d = e.data;
        if (d && d.type === 'hermes-open' && typeof d.id === 'string') open(d.kind === 'card' ? 'card' : 'message', d.id);
      });
    }
  } catch { /* storage blocked: no worker, no messages from it */ }
  window.addEventListener('hashchange', fromHash);
  fromHash();
  return { open };
}
