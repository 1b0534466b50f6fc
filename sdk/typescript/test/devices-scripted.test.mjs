// Paired devices (issue 26) as a client sees them, against a scripted gateway: devices() and
// revoke() frame by frame (owner connections only; the refusals a non-owner or an unknown id
// gets), a revoked device's connection ending in `noaccess`, and pairWithCode() against a
// local HTTP server answering `POST /pair` as the gateway does. No gateway is started; every
// frame both ways is checked against the schema. Docs: docs/security.md.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { HermesClient, HermesError, pairWithCode } from 'hermes-mobile-client';
import { ScriptedSocket, assertFramesValid, nextHello, waitFor } from './helpers.mjs';

after(() => assertFramesValid());

const READY = {
  t: 'ready', v: 1, session: 'mobile:owner-1', device: { id: 'owner-1', name: 'owner-1' }, avatar_url: '',
  capabilities: {
    text: true, voice: true, typing: true, avatar_states: ['idle', 'thinking', 'speaking'], media_in: ['image'],
    media_out: ['image'], prompts: ['exec_approval'], edit: true, max_media_bytes: 8388608, max_text_chars: 12000,
  },
  seq: 0,
};
const ITEMS = [
  { id: 'owner-1', name: 'Laptop', platform: 'web', paired_at: 1765000000000, last_seen: 1765000100000, online: true, push: false, owner: true },
  { id: 'tel-1', name: 'Pixel', platform: 'android', paired_at: 1765000200000, last_seen: null, online: false, push: true, owner: false },
];

async function online() {
  const client = new HermesClient({ url: 'ws://gateway.invalid/ws', token: 't'.repeat(43), deviceId: 'owner-1', WebSocket: ScriptedSocket, lifecycle: false, backoffMinMs: 10, backoffMaxMs: 20 });
  const ready = waitFor(client, 'ready');
  const count = ScriptedSocket.sockets.length;
  client.connect();
  const ws = await nextHello(count);
  ws.recv(READY);
  await ready;
  return { client, ws };
}

test('devices() asks with a devices frame and resolves to its items; offline it rejects at once', async () => {
  const idle = new HermesClient({ url: 'ws://gateway.invalid/ws', token: 'x', WebSocket: ScriptedSocket, lifecycle: false });
  await assert.rejects(idle.devices(), (e) => e instanceof HermesError && e.code === 'offline');

  const { client, ws } = await online();
  const list = client.devices();
  const q = ws.sentOf('devices').at(-1);
  assert.deepEqual(Object.keys(q).sort(), ['id', 't']);
  ws.recv({ t: 'devices', id: q.id, items: ITEMS });
  assert.deepEqual(await list, ITEMS);

  const none = client.devices();
  ws.recv({ t: 'devices', id: ws.sentOf('devices').at(-1).id, items: [] });
  assert.deepEqual(await none, []);
  client.close();
});

test('a connection that is not an owner\'s is refused forbidden, and stays online', async () => {
  const { client, ws } = await online();
  const list = client.devices();
  const q = ws.sentOf('devices').at(-1);
  ws.recv({ t: 'error', code: 'forbidden', message: 'only an owner device may list devices', id: q.id, fatal: false });
  await assert.rejects(list, (e) => e instanceof HermesError && e.code === 'forbidden');
  const revoking = client.revoke('tel-1');
  ws.recv({ t: 'error', code: 'forbidden', message: 'only an owner device may revoke devices', id: ws.sentOf('revoke').at(-1).id, fatal: false });
  await assert.rejects(revoking, (e) => e.code === 'forbidden');
  assert.equal(client.state, 'online');
  client.close();
});

test('revoke(id) sends the id as a string and resolves on `revoked`; an id not paired is bad_frame', async () => {
  const { client, ws } = await online();
  const done = client.revoke('tel-1');
  const q = ws.sentOf('revoke').at(-1);
  assert.equal(q.device, 'tel-1');
  ws.recv({ t: 'revoked', id: q.id, device: 'tel-1' });
  await done;

  const unknown = client.revoke('tel-9');
  ws.recv({ t: 'error', code: 'bad_frame', message: 'no paired device with that id', id: ws.sentOf('revoke').at(-1).id, fatal: false });
  await assert.rejects(unknown, (e) => e.code === 'bad_frame' && /no paired device/.test(e.message));

  const sent = ws.sentOf('revoke').length;
  await assert.rejects(client.revoke(''), (e) => e.code === 'bad_frame');
  assert.equal(ws.sentOf('revoke').length, sent, 'nothing is sent for an empty id');
  client.close();
});

test('a device revoked while connected ends in noaccess (auth_failed) and is not retried', async () => {
  const { client, ws } = await online();
  const noaccess = waitFor(client, 'status', (s) => s.state === 'noaccess');
  const count = ScriptedSocket.sockets.length;
  ws.recv({ t: 'error', code: 'auth_failed', message: 'this device was revoked', fatal: true });
  ws.cut();
  const status = await noaccess;
  assert.equal(status.code, 'auth_failed');
  await new Promise((r) => setTimeout(r, 100)); // well past the backoff (10-20 ms)
  assert.equal(ScriptedSocket.sockets.length, count, 'no new connection');
  client.close();
});

/** A local HTTP server answering POST /pair with `answer(body)`: [status, json, headers?]. */
async function pairServer(answer) {
  const requests = [];
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const body = JSON.parse(raw || 'null');
      requests.push({ method: req.method, url: req.url, type: req.headers['content-type'], body });
      const [status, json, headers = {}] = answer(body);
      res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', ...headers });
      res.end(JSON.stringify(json));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  return { base, requests, close: () => new Promise((r) => server.close(r)) };
}

const CODE = 'AAAAAAAAAAAAAAAAAAAAAA';
const TOKEN = 'b'.repeat(43);

test('pairWithCode() trades the code for a token bound to the device id it returns', async () => {
  const srv = await pairServer((b) => (b.code === CODE ? [200, { token: TOKEN, device: { id: b.device.id || 'dev-0123456789abcdef' } }] : [403, { error: 'forbidden' }]));
  try {
    assert.deepEqual(await pairWithCode(srv.base, CODE, { id: 'tel-1', name: 'Pixel', platform: 'android' }), { token: TOKEN, deviceId: 'tel-1' });
    assert.deepEqual(srv.requests[0], { method: 'POST', url: '/pair', type: 'application/json', body: { code: CODE, device: { id: 'tel-1', name: 'Pixel', platform: 'android' } } });
    // No id: the gateway makes one, and that is the id to connect with.
    assert.deepEqual(await pairWithCode(srv.base, CODE), { token: TOKEN, deviceId: 'dev-0123456789abcdef' });
    assert.equal(srv.requests[1].body.code, CODE);
  } finally {
    await srv.close();
  }
});

test('pairWithCode() refusals carry the gateway\'s code, and retryAfter for too_many_attempts', async () => {
  const answers = {
    wrong: [403, { error: 'forbidden' }],
    often: [429, { error: 'too_many_attempts' }, { 'Retry-After': '37' }],
    bad: [400, { error: 'bad_request', message: 'the device id holds a hidden character' }],
    full: [409, { error: 'full' }],
    nostore: [503, { error: 'unavailable' }],
  };
  const srv = await pairServer((b) => answers[b.code]);
  try {
    const refused = async (code, want, check = () => true) =>
      assert.rejects(pairWithCode(srv.base, code), (e) => e instanceof HermesError && e.code === want && check(e));
    await refused('wrong', 'forbidden');
    await refused('often', 'too_many_attempts', (e) => e.retryAfter === 37);
    await refused('bad', 'bad_request', (e) => e.message.includes('hidden character'));
    await refused('full', 'full');
    await refused('nostore', 'unavailable');
  } finally {
    await srv.close();
  }
  // Nothing listens there any more.
  await assert.rejects(pairWithCode(srv.base, CODE), (e) => e instanceof HermesError && e.code === 'network');
});
