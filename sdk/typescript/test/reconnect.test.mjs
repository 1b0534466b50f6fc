// Re-sending after a reconnect with the same ids, deduplicated by the gateway (I1/I2); the
// offline queue; the page lifecycle (visibilitychange, online, pageshow) and no retry loop
// while hidden, with a fake document and window.
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertFramesValid, closeClients, connected, newClient, record, seenOrWait, startGateway, TapSocket, waitFor } from './helpers.mjs';

let gw;
before(async () => {
  gw = await startGateway();
});
afterEach(() => {
  closeClients();
  TapSocket.reset();
});
after(async () => {
  await gw.stop();
  assertFramesValid();
});

const echo = (text) => (d) => d.final && d.text === `echo: ${text}`;

test('a message not confirmed when the connection died is sent again with its id, and answered once', async () => {
  const client = newClient(gw, { WebSocket: TapSocket });
  const messages = record(client, 'message');
  TapSocket.dropPongs = true; // the first connection never confirms anything
  await connected(client);
  const first = TapSocket.last;

  const text = `only once ${Date.now()}`;
  const id = client.sendText(text);
  await waitFor(client, 'message', echo(text));
  assert.deepEqual(client.pending, [id], 'unconfirmed: its received (or pong) never came');

  TapSocket.dropPongs = false;
  const confirmed = record(client, 'confirmed');
  const offline = waitFor(client, 'status', (d) => d.state === 'offline');
  const ready = waitFor(client, 'ready');
  first.kill();
  const down = await offline;
  assert.ok(down.retryInMs > 0 && down.retryInMs <= 200, `retry in ${down.retryInMs} ms`);
  await ready;
  await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id);
  assert.deepEqual(client.pending, []);

  const second = TapSocket.last;
  assert.notEqual(second, first);
  const resent = second.sent.filter((f) => f.t === 'text');
  assert.deepEqual(resent, [{ t: 'text', id, text }], 'sent again with the same id');
  assert.equal(first.sent.filter((f) => f.t === 'text' && f.id === id).length, 1);

  // The agent reads in order: had the repeat reached it, its echo would come before this one.
  const marker = `marker ${Date.now()}`;
  client.sendText(marker);
  await waitFor(client, 'message', echo(marker));
  assert.equal(messages.filter(echo(text)).length, 1, 'the agent answered once');
});

test('messages sent while offline are queued and go after ready, once', async () => {
  const client = newClient(gw, { WebSocket: TapSocket });
  const messages = record(client, 'message');
  const queued = waitFor(client, 'queued');
  const id = client.sendText('typed offline');
  assert.deepEqual(await queued, { id, type: 'text', online: false });
  assert.deepEqual(client.pending, [id]);
  await connected(client);
  await waitFor(client, 'message', echo('typed offline'));

  // Sent while the socket is being cut: queued, then sent on the next connection.
  const ready = waitFor(client, 'ready');
  const offline = waitFor(client, 'status', (d) => d.state === 'offline');
  TapSocket.last.kill();
  await offline;
  const confirmed = record(client, 'confirmed');
  const id2 = client.sendText('typed while reconnecting');
  await ready;
  await waitFor(client, 'message', echo('typed while reconnecting'));
  await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id2);
  const marker = `marker ${Date.now()}`;
  client.sendText(marker);
  await waitFor(client, 'message', echo(marker));
  assert.equal(messages.filter(echo('typed offline')).length, 1);
  assert.equal(messages.filter(echo('typed while reconnecting')).length, 1);
  const texts = TapSocket.sockets.flatMap((s) => s.sent).filter((f) => f.t === 'text');
  assert.equal(texts.filter((f) => f.id === id2).length, 1, 'never sent twice');
});

/** A fake page: `document` with visibilityState and `window`, both EventTargets. */
function fakePage() {
  const document = new EventTarget();
  document.visibilityState = 'visible';
  const window = new EventTarget();
  return {
    document,
    window,
    hide() {
      document.visibilityState = 'hidden';
      document.dispatchEvent(new Event('visibilitychange'));
    },
    show() {
      document.visibilityState = 'visible';
      document.dispatchEvent(new Event('visibilitychange'));
    },
  };
}

test('hidden: no retry loop; shown again: reconnects at once', async () => {
  const page = fakePage();
  const client = newClient(gw, { WebSocket: TapSocket, lifecycle: page });
  await connected(client);
  page.hide();
  const paused = waitFor(client, 'status', (d) => d.state === 'offline');
  TapSocket.last.kill();
  const down = await paused;
  assert.equal(down.paused, true);
  assert.equal(down.retryAt, 0);
  // The backoff is 50 to 200 ms here: a retry loop would have opened sockets by now.
  await new Promise((r) => setTimeout(r, 800));
  assert.equal(TapSocket.sockets.length, 1, 'no connection attempt while hidden');
  assert.equal(client.state, 'offline');

  const ready = waitFor(client, 'ready');
  page.show();
  await ready;
  assert.equal(TapSocket.sockets.length, 2);
});

test('the online event skips a long backoff', async () => {
  const page = fakePage();
  const client = newClient(gw, { WebSocket: TapSocket, lifecycle: page, backoffMinMs: 60000, backoffMaxMs: 60000 });
  await connected(client);
  const offline = waitFor(client, 'status', (d) => d.state === 'offline');
  TapSocket.last.kill();
  const down = await offline;
  assert.ok(down.retryInMs >= 30000, `retry in ${down.retryInMs} ms`);
  const ready = waitFor(client, 'ready', () => true, 3000);
  page.window.dispatchEvent(new Event('online'));
  await ready;
});

test('pageshow from the back/forward cache checks an open socket and replaces a silent one', async () => {
  const page = fakePage();
  const client = newClient(gw, { WebSocket: TapSocket, lifecycle: page, wakeCheckMs: 300 });
  TapSocket.dropPongs = true; // the socket looks open but nothing answers
  await connected(client);
  TapSocket.dropPongs = false;
  // The check counts frames received since the wake: let the clock pass `ready`'s millisecond.
  await new Promise((r) => setTimeout(r, 5));
  const offline = waitFor(client, 'status', (d) => d.state === 'offline');
  const ready = waitFor(client, 'ready', () => true, 3000);
  page.window.dispatchEvent(Object.assign(new Event('pageshow'), { persisted: true }));
  assert.equal((await offline).reason, 'silent');
  await ready;
  assert.equal(TapSocket.sockets.length, 2);
  assert.equal(TapSocket.sockets[0].sent.at(-1).t, 'ping', 'resume() pinged the old socket');
});

test('close() stops listening to the page', async () => {
  const page = fakePage();
  const client = newClient(gw, { WebSocket: TapSocket, lifecycle: page });
  await connected(client);
  client.close();
  assert.equal(client.state, 'closed');
  page.show();
  page.window.dispatchEvent(new Event('online'));
  assert.equal(TapSocket.sockets.length, 1);
  assert.equal(client.state, 'closed');
});
