// The journal against the release gateway (issue 24): `received` confirms a send, a client
// that comes back resumes after the seq it kept (nothing missed, nothing twice), `history`
// pages back through the conversation, `forget` empties it, and with MOBILE_HISTORY=off the
// rest still works. The client's rules frame by frame: resume-scripted.test.mjs.
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

/** A seq store in memory, as an application's file or database would be. */
function memoryStore() {
  return { value: 0, load() { return this.value; }, save(n) { this.value = n; } };
}

const echo = (text) => (d) => d.final && d.text === `echo: ${text}`;

test('ready says the journal; `received` confirms a text with its seq, and a re-send of the id again', async () => {
  const client = newClient(gw, { WebSocket: TapSocket });
  const ready = await connected(client);
  assert.equal(ready.seq, 0, 'a new device has no entries');
  assert.equal(ready.resumeAfter, 0);
  assert.ok(client.journal && client.hasHistory);
  assert.deepEqual(TapSocket.last.sent[0].resume, { after: 0 });
  const frames = record(client, 'frame');
  const confirmed = record(client, 'confirmed');
  const id = client.sendText('keep this');
  await waitFor(client, 'message', echo('keep this'));
  const c = await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id);
  assert.ok(Number.isInteger(c.seq) && c.seq > 0, `received's seq: ${c.seq}`);
  assert.equal(TapSocket.last.sent.filter((f) => f.t === 'ping').length, 0, 'no ping trick with a journal');

  const receipts = () => frames.filter((d) => d.frame.t === 'received' && d.frame.id === id).map((d) => d.frame.seq);
  TapSocket.last.send(JSON.stringify({ t: 'text', id, text: 'keep this' })); // a re-send of the same id
  await waitFor(client, 'frame', () => receipts().length === 2);
  assert.deepEqual(receipts(), [c.seq, c.seq], 'received again, with the same seq');
  const marker = `marker ${Date.now()}`;
  client.sendText(marker);
  await waitFor(client, 'message', echo(marker));
  assert.equal(frames.filter((d) => d.frame.t === 'message' && d.frame.text === 'echo: keep this').length, 1, 'the re-send reached the agent once');
});

test('a client that comes back resumes after its seq: what came meanwhile once, then nothing twice', async () => {
  const store = memoryStore();
  const deviceId = `sdk-ts-resume-${process.pid}`;
  const words = Array.from({ length: 30 }, (_, i) => `w${i}`).join(' ');
  const first = newClient(gw, { deviceId, seqStore: store });
  await connected(first);
  first.sendText(`/stream ${words}`);
  await waitFor(first, 'message', (d) => !d.final); // the stream has begun
  first.close(); // away: the rest of the stream is held for the device, and journaled
  const keptThen = store.value;
  assert.ok(keptThen > 0, 'the first version was kept');

  const second = newClient(gw, { deviceId, seqStore: store, WebSocket: TapSocket });
  const messages = record(second, 'message');
  const ready = waitFor(second, 'ready');
  second.connect();
  assert.equal((await ready).resumeAfter, keptThen);
  assert.deepEqual(TapSocket.last.sent[0].resume, { after: keptThen });
  await seenOrWait(messages, second, 'message', (d) => d.final && d.text === words, 10000);
  assert.equal(messages.filter((d) => d.final).length, 1, 'the final version once');
  assert.ok(store.value > keptThen);
  const keptNow = store.value;
  second.close();

  const third = newClient(gw, { deviceId, seqStore: store });
  const again = record(third, 'message');
  const resumed = waitFor(third, 'resumed');
  await connected(third);
  assert.deepEqual(await resumed, { seq: (await resumed).seq, after: keptNow });
  assert.deepEqual(again, [], 'nothing replayed twice');
});

test('history pages back through the conversation, the person\'s own messages included; forget empties it', async () => {
  const client = newClient(gw);
  await connected(client);
  for (const t of ['one', 'two', 'three']) {
    client.sendText(t);
    await waitFor(client, 'message', echo(t));
  }
  const seen = [];
  let page = await client.history(null, 2);
  assert.equal(page.items.length, 2);
  assert.equal(page.more, true);
  seen.unshift(...page.items);
  while (page.more) {
    page = await client.history(page.items[0].seq, 2);
    seen.unshift(...page.items);
  }
  const seqs = seen.map((i) => i.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'oldest first, page after page');
  assert.equal(new Set(seqs).size, seqs.length, 'each entry once');
  const shown = seen.map((i) => (i.from === 'user' ? `me: ${i.text}` : `${i.t}: ${i.text}`));
  assert.deepEqual(shown, ['me: one', 'message: echo: one', 'me: two', 'message: echo: two', 'me: three', 'message: echo: three']);
  assert.ok(seen.filter((i) => i.t === 'message').every((i) => i.final === true && !('chunk' in i)));

  const all = await client.history(null, 500); // cut to 200 by the gateway
  assert.equal(all.items.length, 6);
  assert.equal(all.more, false);

  await client.forget();
  assert.deepEqual(await client.history(), { items: [], more: false });
  const marker = 'after forgetting';
  client.sendText(marker);
  await waitFor(client, 'message', echo(marker));
  const after = await client.history();
  assert.ok(after.items.every((i) => i.seq > seqs.at(-1)), 'the seq goes on from where it was');
});

test('with MOBILE_HISTORY=off: seq, resume and received, but history is refused', async () => {
  const off = await startGateway({ MOBILE_HISTORY: 'off' });
  try {
    const client = newClient(off, { WebSocket: TapSocket });
    const ready = await connected(client);
    assert.ok(Number.isInteger(ready.seq));
    assert.equal(client.hasHistory, false);
    assert.equal(ready.capabilities.history, undefined);
    const confirmed = record(client, 'confirmed');
    const id = client.sendText('no history');
    await waitFor(client, 'message', echo('no history'));
    assert.ok(Number.isInteger((await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id)).seq));
    await assert.rejects(client.history(), (e) => e.code === 'unsupported_frame');
    // The gateway's own answer to the frame, not fatal.
    const errors = record(client, 'error');
    TapSocket.last.send(JSON.stringify({ t: 'history', id: 'h-off' }));
    const e = await seenOrWait(errors, client, 'error', (d) => d.id === 'h-off');
    assert.deepEqual([e.code, e.fatal], ['unsupported_frame', false]);
    assert.equal(client.online, true);
    client.close();
  } finally {
    await off.stop();
  }
});
