// The Devices panel (issue 26): the paired devices, for an owner, and their Revoke buttons.
// The protocol side (`devices`, `revoke`) is HermesClient's; this file is the page's.
//
// Only an owner's connection (the shared token, or a device paired with `--owner`) may list
// and revoke devices; any other gets `forbidden`, and the page then shows nothing of it. The
// list is asked after each `ready` and whenever the panel opens, so "online" and "last seen"
// are fresh when looked at.
import { revealHiddenChars } from '/protocol.js';

function fmtDate(ms) {
  return new Date(ms).toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
}

function fmtAgo(ms) {
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return fmtDate(ms);
}

const shownName = (d) => (typeof d.name === 'string' && d.name ? d.name : d.id);

/**
 * The Devices button (#devices-button) in the header, its panel (#devices-panel: #devices-note
 * and #devices-list) and the revoke dialog (#revoke-dialog). `getClient()` gives the current
 * HermesClient or null; `ownDeviceId()` this browser's device id (for the "this device"
 * badge). The page's helpers: `el(tag, cls, text)` makes an element, `revealInto(target,
 * text)` fills it with text whose hidden characters show as ⟨U+…⟩ markers, and
 * `errorText(e)` says what went wrong in one line.
 */
export function initDevices({ getClient, ownDeviceId, el, revealInto, errorText }) {
  const $ = (id) => document.getElementById(id);
  const ui = {
    button: $('devices-button'), panel: $('devices-panel'), list: $('devices-list'), note: $('devices-note'),
    title: $('devices-title'), close: $('devices-close'),
    dialog: $('revoke-dialog'), dialogName: $('revoke-name'), dialogSelf: $('revoke-self'),
    cancel: $('revoke-cancel'), confirm: $('revoke-confirm'),
  };
  const revealed = (tag, cls, text) => revealInto(el(tag, cls), text);
  const state = {
    owner: false, // the last `devices` of this client's connection was answered
    visible: false, // the chat screen is showing
    open: false,
    items: [],
    asked: 0, // counts requests: an answer overtaken by a newer one is dropped
    revoking: null, // the item the revoke dialog asks about
  };

  async function refresh(c) {
    if (!c || !c.online) return;
    const asked = ++state.asked;
    let items;
    try {
      items = await c.devices();
    } catch (e) {
      if (getClient() !== c || asked !== state.asked) return;
      if (e.code === 'offline' || e.code === 'timeout') {
        note(`The list could not be loaded (${e.code}).`, 'error');
        return;
      }
      // `forbidden`: not an owner. Anything else: a gateway older than devices.
      state.owner = false;
      state.open = false;
      render();
      return;
    }
    if (getClient() !== c || asked !== state.asked) return;
    state.owner = true;
    state.items = items;
    render();
  }

  function note(text, kind = 'info') {
    ui.note.textContent = text;
    ui.note.dataset.kind = kind;
    ui.note.hidden = !text;
  }

  function render() {
    const shown = state.visible && state.owner;
    const open = shown && state.open;
    ui.button.hidden = !shown;
    ui.button.setAttribute('aria-expanded', String(open));
    ui.panel.hidden = !open;
    if (!open) return;
    const own = ownDeviceId();
    const rows = state.items.map((d) => row(d, d.id === own));
    if (!rows.length) rows.push(el('li', 'devices-empty', 'No device is paired yet: run hermes-mobile pair to pair one with a code.'));
    ui.list.replaceChildren(...rows);
  }

  // One device: its name and id as they are (hidden characters shown as ⟨U+…⟩ markers, issue
  // 23: a name could otherwise pass for another device's), where it runs, when it was paired
  // and last seen, and its Revoke button.
  function row(d, self) {
    const li = el('li', 'device');
    li.dataset.deviceId = d.id;
    li.dataset.online = String(d.online === true);
    const head = el('div', 'device-head');
    head.append(revealed('span', 'device-name', shownName(d)));
    if (d.online === true) head.append(el('span', 'device-badge online', 'online'));
    if (d.owner === true) head.append(el('span', 'device-badge owner', 'owner'));
    if (self) head.append(el('span', 'device-badge self', 'this device'));
    const facts = el('div', 'device-facts');
    const platform = typeof d.platform === 'string' && d.platform ? d.platform : 'unknown platform';
    facts.append(revealed('code', 'device-id', d.id), ` · ${revealHiddenChars(platform)}`);
    if (Number.isFinite(d.paired_at)) facts.append(` · paired ${fmtDate(d.paired_at)}`);
    if (d.online !== true) { // online: its badge says so
      const seen = Number.isFinite(d.last_seen) ? `last seen ${fmtAgo(d.last_seen)}` : 'not seen since pairing';
      facts.append(' · ', el('span', 'device-seen', seen));
    }
    if (d.push === true) facts.append(' · notifications on');
    const revoke = el('button', 'secondary-button device-revoke', 'Revoke');
    revoke.type = 'button';
    revoke.setAttribute('aria-label', `Revoke ${revealHiddenChars(shownName(d))}`);
    revoke.addEventListener('click', () => ask(d, self));
    const text = el('div', 'device-text');
    text.append(head, facts);
    li.append(text, revoke);
    return li;
  }

  function ask(d, self) {
    state.revoking = d;
    revealInto(ui.dialogName, shownName(d));
    ui.dialogSelf.hidden = !self;
    ui.dialog.showModal();
  }

  // The gateway revokes on receipt and answers after the commit (L70). A `revoke` sent whose
  // answer never came (the connection dropped, or no answer in time) may well have taken
  // effect, so the note says to look, and the list is asked again: now, and after the next
  // `ready` (onReady) when the connection was lost. One never sent was not revoked.
  async function revokeDevice(d) {
    const c = getClient();
    if (!c) return;
    const name = `“${revealHiddenChars(shownName(d))}”`;
    const sent = c.online;
    note(`Revoking ${name}…`);
    try {
      await c.revoke(d.id);
      note(`${name} is revoked: it has no access any more.`);
    } catch (e) {
      if (sent && (e.code === 'offline' || e.code === 'timeout')) {
        note(`${name} may not have been revoked (${e.code}); check the list.`, 'error');
      } else {
        note(`${name} was not revoked: ${errorText(e)}`, 'error');
      }
    }
    ui.title.focus(); // its row and button go away with the refresh
    refresh(c);
  }

  function toggle(open) {
    state.open = open;
    if (open) note('');
    render();
    if (open) {
      ui.title.focus();
      refresh(getClient());
    } else {
      ui.button.focus();
    }
  }

  ui.button.addEventListener('click', () => toggle(!state.open));
  ui.close.addEventListener('click', () => toggle(false));
  ui.cancel.addEventListener('click', () => {
    state.revoking = null;
    ui.dialog.close();
  });
  ui.confirm.addEventListener('click', () => {
    const d = state.revoking;
    state.revoking = null;
    ui.dialog.close();
    if (d) revokeDevice(d);
  });
  ui.dialog.addEventListener('cancel', () => (state.revoking = null)); // Esc keeps it

  return {
    /** The panel belongs to the chat screen. */
    show(chatVisible) {
      state.visible = chatVisible;
      render();
    },
    /** After each `ready`: asks the list (the button shows once it is answered). */
    onReady(client) {
      refresh(client);
    },
    /** A new token, or none: not an owner until its connection's `devices` is answered. */
    reset() {
      state.owner = false;
      render();
    },
  };
}
