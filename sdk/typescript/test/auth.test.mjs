// auth_failed with a wrong token: state noaccess, and no retry loop.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertFramesValid, closeClients, newClient, record, startGateway, TapSocket, waitFor } from './helpers.mjs';

let gw;
before(async () => {
  gw = await startGateway();
});
after(async () => {
  closeClients();
  TapSocket.reset();
  await gw.stop();
  assertFramesValid();
});

test('a wrong token: auth_failed, state noaccess, one connection attempt only', async () => {
  const client = newClient(gw, { token: 'not-the-token-0123456789', WebSocket: TapSocket });
  const errors = record(client, 'error');
  const states = record(client, 'status');
  const noaccess = waitFor(client, 'status', (d) => d.state === 'noaccess');
  client.connect();
  assert.deepEqual(await noaccess, { state: 'noaccess', code: 'auth_failed', message: 'invalid token' });
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, 'auth_failed');
  assert.equal(errors[0].fatal, true);
  assert.equal(client.online, false);

  // Neither the backoff (50 to 200 ms here) nor a wake-up may try again.
  client.reconnectNow();
  client.resume();
  await new Promise((r) => setTimeout(r, 2000));
  assert.equal(TapSocket.sockets.length, 1, `${TapSocket.sockets.length} connection attempts in 2 s`);
  assert.equal(client.state, 'noaccess');
  assert.deepEqual(states.map((s) => s.state), ['connecting', 'noaccess']);
  assert.equal((await gw.healthz()).connections, 0);
});
