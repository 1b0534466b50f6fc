// A turn, a streamed reply, a long split reply and a card, against the release gateway's demo agent.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { HermesError } from 'hermes-mobile-client';
import { assertFramesValid, closeClients, connected, newClient, record, seenOrWait, startGateway, waitFor } from './helpers.mjs';

let gw;
let client;
before(async () => {
  gw = await startGateway();
  client = newClient(gw);
  const ready = await connected(client);
  assert.equal(ready.v, 1);
  assert.equal(ready.session, `mobile:${client.deviceId}`);
  assert.equal(client.state, 'online');
  assert.equal(client.online, true);
  assert.equal(client.capabilities.max_text_chars, 12000);
});
after(async () => {
  closeClients();
  await gw.stop();
  assertFramesValid();
});

const finalText = (text) => (d) => d.final && d.text === text;

test('a turn: text → confirmed, echo reply, typing and avatar', async () => {
  const confirmed = record(client, 'confirmed');
  const avatar = record(client, 'avatar');
  const typing = record(client, 'typing');
  const reply = waitFor(client, 'message', finalText('echo: hello there'));
  const id = client.sendText('hello there');
  const m = await reply;
  assert.equal(m.complete, true);
  assert.equal(m.key, m.id);
  await seenOrWait(typing, client, 'typing', (d) => d.active === false);
  await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id);
  assert.deepEqual(client.pending, []);
  assert.ok(avatar.some((a) => a.state === 'thinking'), 'avatar thinking');
  assert.ok(typing.some((t) => t.active === true), 'typing on');
});

test('a streamed reply: each version grows to the final text', async () => {
  const messages = record(client, 'message');
  const done = waitFor(client, 'message', finalText('a b c'));
  client.sendText('/stream a b c');
  const last = await done;
  const versions = messages.filter((m) => m.id === last.id);
  assert.deepEqual(versions.map((m) => m.text), ['a', 'a b', 'a b c']);
  assert.deepEqual(versions.map((m) => m.final), [false, false, true]);
  assert.deepEqual(versions.map((m) => m.version), [1, 2, 3]);
  assert.deepEqual(versions.map((m) => m.edit), [false, true, true]);
});

test('a long reply split in chunks arrives as one message of exactly 30000 characters', async () => {
  const messages = record(client, 'message');
  const done = waitFor(client, 'message', (d) => d.final && d.text.length === 30000);
  client.sendText('/long 30000');
  const m = await done;
  assert.equal(m.text, '0123456789\n'.repeat(Math.ceil(30000 / 11)).slice(0, 30000));
  const parts = messages.filter((x) => x.id === m.id);
  assert.ok(parts.length > 1, `split in ${parts.length} frame(s)`);
  assert.equal(m.chunk.total, parts.length);
  assert.ok(parts.slice(0, -1).every((x) => !x.final && !x.complete), 'nothing final before the last chunk');
});

test('a card answered once: approved (once), and closed for a second answer', async () => {
  const promptEvent = waitFor(client, 'prompt', (d) => d.card.command === 'ls');
  client.sendText('/approve ls');
  const { card, repeat } = await promptEvent;
  assert.equal(repeat, false);
  assert.equal(card.kind, 'exec_approval');
  assert.equal(card.description, 'demo approval');
  assert.deepEqual(card.options.map((o) => o.id), ['once', 'session', 'always', 'deny']);
  assert.equal(card.state, 'open');
  assert.equal(client.prompts.get(card.id), card);

  const done = waitFor(client, 'promptdone', (d) => d.id === card.id);
  const reply = waitFor(client, 'message', finalText('approved (once): ls'));
  client.answer(card.id, 'once');
  const closed = await done;
  assert.equal(closed.optionId, 'once');
  assert.equal(closed.expired, false);
  assert.equal(closed.card.state, 'done');
  await reply;
  assert.throws(() => client.answer(card.id, 'deny'), (e) => e instanceof HermesError && e.code === 'prompt_closed');
  assert.throws(() => client.sendText('   '), (e) => e instanceof HermesError && e.code === 'bad_frame');
  assert.throws(() => client.sendText('x'.repeat(12001)), (e) => e instanceof HermesError && e.code === 'too_big');
});
