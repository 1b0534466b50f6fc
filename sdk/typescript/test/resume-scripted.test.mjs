// The client's journal rules (issue 24, L56-L60) against a scripted gateway, frame by frame:
// the seq it keeps and hands to seqStore, `resume` in hello, `received` as the confirmation,
// history() and forget(), and a gateway without a journal as before. Every frame both ways
// is checked against the schema. The same rules against the real gateway: resume.test.mjs.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { HermesClient, HermesError } from 'hermes-mobile-client';
import { ScriptedSocket, assertFramesValid, nextHello, record, seenOrWait, waitFor } from './helpers.mjs';

after(() => assertFramesValid());

const CAPABILITIES = {
  text: true, voice: true, typing: true, avatar_states: ['idle', 'thinking', 'speaking'], media_in: ['image', 'document'],
  media_out: ['image', 'document'], prompts: ['exec_approval', 'slash_confirm', 'clarify'], edit: true,
  max_media_bytes: 8388608, max_text_chars: 12000,
};
const READY = { t: 'ready', v: 1, session: 'mobile:d1', device: { id: 'd1', name: 'd1' }, avatar_url: '', capabilities: CAPABILITIES };
const HISTORY = { ...CAPABILITIES, history: { items: 5000, days: 30 } };
const file = (id, part, parts, data, seq) => ({ t: 'media', id, kind: 'document', mime: 'text/plain', filename: 'a.txt', part, parts, final: true, size: 3, ...(data ? { data } : {}), seq });
const card = (id, kind, options, seq) => ({ t: 'prompt', id, kind, text: 'Sure?', session: 'mobile:d1', options: options.map((o) => ({ style: '', ...o })), timeout_seconds: 300, seq });

/** A store that remembers every save, as an application's would. */
function memoryStore(start = 0, { async = false } = {}) {
  const saves = [];
  return {
    saves,
    value: start,
    load() {
      return async ? Promise.resolve(this.value) : this.value;
    },
    save(n) {
      saves.push(n);
      this.value = n;
    },
  };
}

function newScripted(opts = {}) {
  return new HermesClient({ url: 'ws://gateway.invalid/ws', token: 't0ken', deviceId: 'd1', WebSocket: ScriptedSocket, lifecycle: false, backoffMinMs: 10, backoffMaxMs: 20, ...opts });
}

/**
 * Connects (or, after a cut, lets the client reconnect) and answers its hello with `ready`
 * (+ `fields`); returns the socket and its hello.
 */
async function open(client, fields = {}) {
  const readyEvent = waitFor(client, 'ready');
  const count = ScriptedSocket.sockets.length;
  if (client.state === 'idle' || client.state === 'closed') client.connect();
  const ws = await nextHello(count);
  const hello = ws.sent[0];
  ws.recv({ ...READY, ...fields });
  await readyEvent;
  return { ws, hello };
}

test('hello carries resume.after: 0 for a new client, the stored seq after that (an async store too)', async () => {
  const fresh = newScripted();
  const { hello } = await open(fresh, { seq: 0 });
  assert.deepEqual(hello.resume, { after: 0 });
  fresh.close();

  const store = memoryStore(41, { async: true });
  const kept = newScripted({ seqStore: store });
  const { hello: h2 } = await open(kept, { seq: 41 });
  assert.deepEqual(h2.resume, { after: 41 });
  assert.equal(kept.seq, 41);
  assert.equal(kept.journal, true);
  kept.close();
});

test('the seq is kept once what it covers is whole: all chunks, all parts, a card, its closing', async () => {
  const store = memoryStore();
  const client = newScripted({ seqStore: store });
  const { ws } = await open(client, { seq: 0, capabilities: HISTORY });
  const resumed = waitFor(client, 'resumed');
  ws.recv({ t: 'message', id: 'r1', text: 'Hello, ', chunk: { index: 0, total: 2 }, final: true, seq: 3 });
  assert.equal(client.seq, 0, 'one chunk of two: not kept yet');
  ws.recv({ t: 'message', id: 'r1', text: 'world', chunk: { index: 1, total: 2 }, final: true, seq: 3 });
  assert.equal(client.seq, 3);
  ws.recv(file('f1', 0, 2, 'aGk=', 4));
  assert.equal(client.seq, 3, 'one part of two: not kept yet');
  ws.recv(file('f1', 1, 2, 'IQ==', 4));
  assert.equal(client.seq, 4);
  // Opened and closed since (L58): no time left, then how it closed.
  const opened = waitFor(client, 'prompt');
  ws.recv({ ...card('p1', 'slash_confirm', [{ id: 'once', label: 'Yes' }, { id: 'cancel', label: 'No' }], 6), timeout_seconds: 0 });
  assert.equal((await opened).card.timeoutSeconds, 0);
  ws.recv({ t: 'prompt_done', id: 'p1', option_id: 'once', seq: 7 });
  assert.equal(client.prompts.get('p1').state, 'done');
  // A file whose bytes the gateway no longer holds: its metadata, and its seq.
  const gone = waitFor(client, 'media', (d) => d.id === 'f2');
  ws.recv(file('f2', 0, 1, null, 8));
  const g = await gone;
  assert.equal(g.blob, null);
  assert.equal(g.url, null);
  assert.equal(g.seq, 8);
  assert.equal(client.replaying, true, 'between ready and resumed');
  ws.recv({ t: 'resumed', seq: 12 });
  assert.deepEqual(await resumed, { seq: 12, after: 0 });
  assert.equal(client.replaying, false);
  // `resumed` says the latest seq; the person's own entries above 8 are not replayed, and a
  // live frame held behind the replay may carry one of those seqs: the client keeps what it saw.
  assert.equal(client.seq, 8);
  assert.deepEqual(store.saves, [3, 4, 6, 7, 8]);
  // A frame with a seq at or below the kept one changes nothing.
  ws.recv({ t: 'message', id: 'r2', text: 'again', chunk: { index: 0, total: 1 }, final: true, seq: 5 });
  assert.equal(client.seq, 8);
  client.close();
});

test("a card's seq is kept only after the application's listener had the card", async () => {
  // An open card at or before `after` is not sent again (L58): had the seq been saved before
  // the listener ran, a bot that crashed in it would never see the card after its restart.
  const store = memoryStore();
  const client = newScripted({ seqStore: store });
  const { ws } = await open(client, { seq: 0, capabilities: HISTORY });
  let savedWhenSeen = null;
  client.addEventListener('prompt', () => {
    savedWhenSeen = [...store.saves];
  });
  ws.recv(card('p1', 'exec_approval', [{ id: 'once', label: 'Once' }, { id: 'deny', label: 'Deny' }], 7));
  assert.deepEqual(savedWhenSeen, [], 'nothing saved while the listener ran');
  assert.deepEqual(store.saves, [7], 'saved after it');
  client.close();
});

test('with a journal, `received` confirms a text and a pong does not; a card answer still by pong', async () => {
  const client = newScripted();
  const { ws } = await open(client, { seq: 0 });
  const confirmed = record(client, 'confirmed');
  const id = client.sendText('hello');
  await waitFor(client, 'sent', (d) => d.id === id);
  assert.equal(ws.sentOf('ping').length, 0, 'no ping trick with a journal');
  ws.recv({ t: 'pong', ts: 99 });
  assert.deepEqual(client.pending, [id]);
  ws.recv({ t: 'received', id, seq: 1 });
  assert.deepEqual(confirmed, [{ id, type: 'text', seq: 1 }]);
  assert.deepEqual(client.pending, []);
  ws.recv({ t: 'received', id, seq: 1 }); // a duplicate's: nothing more
  assert.equal(confirmed.length, 1);

  ws.recv(card('p9', 'exec_approval', [{ id: 'once', label: 'Once' }, { id: 'deny', label: 'Deny' }], 2));
  const answer = client.answer('p9', 'deny');
  await waitFor(client, 'sent', (d) => d.id === answer);
  const ping = ws.sentOf('ping').at(-1);
  assert.ok(ping, 'a card answer is confirmed by a pong (no `received` for it)');
  ws.recv({ t: 'pong', ts: ping.ts });
  assert.deepEqual(confirmed.at(-1), { id: answer, type: 'prompt', seq: null });
  client.close();
});

test('a message unconfirmed by `received` is sent again after a reconnect, once confirmed it is not', async () => {
  const client = newScripted();
  const { ws } = await open(client, { seq: 0 });
  const a = client.sendText('first');
  const b = client.sendText('second');
  await waitFor(client, 'sent', (d) => d.id === b);
  ws.recv({ t: 'received', id: a, seq: 1 });
  const sent = record(client, 'sent');
  ws.cut();
  const { ws: ws2, hello } = await open(client, { seq: 1 });
  assert.deepEqual(hello.resume, { after: 0 }, 'a received seq is the person\'s own entry: not replayed, not kept');
  await seenOrWait(sent, client, 'sent', (d) => d.id === b);
  assert.deepEqual(ws2.sentOf('text').map((f) => f.text), ['second']);
  client.close();
});

test('without `seq` in ready (no journal): the pong confirms, as before, and resendConfirmed still works', async () => {
  const client = newScripted({ resendConfirmed: true });
  const { ws } = await open(client); // no seq
  assert.equal(client.journal, false);
  assert.equal(client.hasHistory, false);
  const id = client.sendText('old gateway');
  await waitFor(client, 'sent', (d) => d.id === id);
  const ping = ws.sentOf('ping').at(-1);
  ws.recv({ t: 'pong', ts: ping.ts });
  assert.deepEqual(client.pending, []);
  await assert.rejects(client.history(), (e) => e instanceof HermesError && e.code === 'unsupported_frame');
  const sent = record(client, 'sent');
  ws.cut();
  const { ws: ws2 } = await open(client);
  await seenOrWait(sent, client, 'sent', (d) => d.id === id);
  assert.deepEqual(ws2.sentOf('text').map((f) => f.id), [id], 'resendConfirmed re-sends a confirmed message without a journal');
  client.close();
});

test('history(before, limit) asks for a page and resolves {items, more}; limits are checked', async () => {
  const client = newScripted();
  const { ws } = await open(client, { seq: 9, capabilities: HISTORY });
  const page = client.history(9, 500);
  const q = ws.sentOf('history').at(-1);
  assert.deepEqual({ before: q.before, limit: q.limit }, { before: 9, limit: 200 });
  const items = [
    { t: 'text', from: 'user', id: 'u1', text: 'hi', seq: 1 },
    { t: 'message', id: 'r1', text: 'echo: hi', final: true, seq: 2 },
    { ...card('p1', 'slash_confirm', [{ id: 'once', label: 'Yes' }], 4), timeout_seconds: 0, closed: { expired: true } },
  ];
  ws.recv({ t: 'history', id: q.id, items, more: true });
  assert.deepEqual(await page, { items, more: true });
  const first = client.history();
  const q2 = ws.sentOf('history').at(-1);
  assert.equal('before' in q2 || 'limit' in q2, false, 'the gateway\'s defaults');
  ws.recv({ t: 'history', id: q2.id, items: [], more: false });
  assert.deepEqual(await first, { items: [], more: false });
  await assert.rejects(client.history(-1), (e) => e.code === 'bad_frame');
  await assert.rejects(client.history(null, 0), (e) => e.code === 'bad_frame');
  // History off at the gateway after all: its unsupported_frame rejects the promise.
  const refused = client.history();
  const q3 = ws.sentOf('history').at(-1);
  ws.recv({ t: 'error', code: 'unsupported_frame', message: 'history is off on this gateway', id: q3.id, fatal: false });
  await assert.rejects(refused, (e) => e.code === 'unsupported_frame');
  client.close();
});

test('forget() resolves on `forgotten`; offline it rejects at once', async () => {
  const client = newScripted();
  await assert.rejects(client.forget(), (e) => e.code === 'offline');
  const { ws } = await open(client, { seq: 3, capabilities: HISTORY });
  const done = client.forget();
  const q = ws.sentOf('forget').at(-1);
  ws.recv({ t: 'forgotten', id: q.id });
  assert.deepEqual(await done, { t: 'forgotten', id: q.id });
  client.close();
});

test('a ready seq below the one kept (a new journal) starts again from 0', async () => {
  const store = memoryStore(500);
  const client = newScripted({ seqStore: store });
  const count = ScriptedSocket.sockets.length;
  client.connect();
  const ws = await nextHello(count);
  assert.deepEqual(ws.sent[0].resume, { after: 500 });
  ws.recv({ ...READY, seq: 3 });
  // Dropped and opened again, resuming after 0 so the new journal's entries are replayed.
  const again = await nextHello(count + 1);
  assert.notEqual(again, ws);
  assert.deepEqual(again.sent[0].resume, { after: 0 });
  assert.equal(store.value, 0);
  client.close();
});
