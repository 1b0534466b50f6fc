// Where it runs: Node's global WebSocket (Node 22+, or Node 20/21 with --experimental-websocket,
// in a child process), `ws` injected (the other tests), and Node with no page at all.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { HermesClient, HermesError } from 'hermes-mobile-client';
import { assertFramesValid, closeClients, connected, newClient, startGateway, waitFor, WS } from './helpers.mjs';

let gw;
before(async () => {
  gw = await startGateway();
});
after(async () => {
  closeClients();
  await gw.stop();
  assertFramesValid();
});

// The flag that gives this Node a global WebSocket: none on 22+, --experimental-websocket on
// 20.10+ and 21, else null.
function globalWebSocketFlags() {
  if (typeof globalThis.WebSocket === 'function') return [];
  const probe = spawnSync(process.execPath, ['--experimental-websocket', '-e', 'process.exit(typeof WebSocket === "function" ? 0 : 1)']);
  return probe.status === 0 ? ['--experimental-websocket'] : null;
}

test("Node's global WebSocket, no WebSocket option", async (t) => {
  const flags = globalWebSocketFlags();
  if (!flags) {
    t.skip(`node ${process.version} has no global WebSocket, not even with --experimental-websocket`);
    return;
  }
  const script = `
    import { HermesClient } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
    const client = new HermesClient({ url: process.argv[1], token: process.argv[2], deviceId: 'sdk-ts-global-ws' });
    const timer = setTimeout(() => { console.log(JSON.stringify({ error: 'no echo within 5 s', state: client.state })); process.exit(1); }, 5000);
    client.addEventListener('message', (e) => {
      if (!e.detail.final) return;
      clearTimeout(timer);
      client.close();
      console.log(JSON.stringify({ text: e.detail.text, state: client.state, session: client.ready.session }));
    });
    client.addEventListener('ready', () => client.sendText('from the global WebSocket'));
    client.connect();
  `;
  const r = spawnSync(process.execPath, [...flags, '--no-warnings', '--input-type=module', '-e', script, gw.url, gw.token], {
    encoding: 'utf8',
    timeout: 15000,
  });
  assert.equal(r.status, 0, `exit ${r.status}\n${r.stdout}\n${r.stderr}`);
  assert.deepEqual(JSON.parse(r.stdout.trim()), {
    text: 'echo: from the global WebSocket',
    state: 'closed',
    session: 'mobile:sdk-ts-global-ws',
  });
  // It closed its socket and cleared its timers: the process ended by itself.
});

test('Node with no document or window: the default lifecycle is none, and nothing crashes', async () => {
  assert.equal(typeof globalThis.document, 'undefined');
  const client = new HermesClient({ url: gw.url, token: gw.token, WebSocket: WS, deviceId: 'sdk-ts-no-page' });
  try {
    await connected(client);
    client.resume(); // what a native app calls on its foreground event: pings an open socket
    const reply = waitFor(client, 'message', (d) => d.final && d.text === 'echo: no page');
    client.sendText('no page');
    await reply;
  } finally {
    client.close();
  }
  assert.equal(client.state, 'closed');
});

test('lifecycle: false works as none', async () => {
  const client = newClient(gw, { lifecycle: false });
  await connected(client);
  assert.equal(client.online, true);
});

test('no WebSocket or no url is a bad_config error at once, not a retry loop', () => {
  const bad = (e) => e instanceof HermesError && e.code === 'bad_config';
  assert.throws(() => new HermesClient({ url: gw.url, token: gw.token, WebSocket: WS, lifecycle: false, ...{ token: '' } }), bad);
  assert.throws(() => new HermesClient({ token: gw.token, WebSocket: WS }), bad); // no location in Node
  if (typeof globalThis.WebSocket !== 'function') assert.throws(() => new HermesClient({ url: gw.url, token: gw.token }), bad);
});
